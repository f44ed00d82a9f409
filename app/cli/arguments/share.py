"""`shardchat share`: what it accepts (app.cli.commands.share_command runs it)."""

from __future__ import annotations

import argparse

from app.cli.arguments.arg_types import positive_int
from app.cli.arguments.run_later import run_later
from engine.remote.addresses import DEFAULT_RPC_PORT, LOOPBACK


def add_share_command(commands: argparse._SubParsersAction) -> None:
    share = commands.add_parser(
        "share",
        help="lend this computer's GPU and memory to ShardChat on another computer",
        description="Run llama.cpp's RPC server from this build until Ctrl-C, so that "
        "ShardChat on another computer can place parts of a model here. It listens on "
        "127.0.0.1 only: the other computer reaches it through SSH (shardchat devices add "
        "ssh://USER@THIS-COMPUTER). Tensors sent here are cached on disk, so loading the "
        "same model again sends no weights.",
    )
    share.add_argument(
        "--port", type=positive_int, default=DEFAULT_RPC_PORT, help=f"(default {DEFAULT_RPC_PORT})"
    )
    share.add_argument(
        "--listen",
        metavar="ADDRESS",
        default=LOOPBACK,
        help="serve this network interface's address directly instead of 127.0.0.1; "
        "anyone on that network can then use this computer (never 0.0.0.0)",
    )
    share.add_argument("--threads", type=positive_int, default=None, help="CPU threads")
    share.add_argument(
        "--device",
        action="append",
        default=[],
        metavar="NAME",
        help="lend this ggml device only (CPU, Vulkan0, CUDA0, ...; repeat for more); "
        "default: every GPU, or the CPU where there is none",
    )
    share.add_argument(
        "--no-cache", action="store_true", help="do not keep the tensors sent here on disk"
    )
    share.set_defaults(
        command="share", run=run_later("app.cli.commands.share_command", "run_share")
    )
