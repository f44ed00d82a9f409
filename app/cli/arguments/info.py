"""`shardchat info`: what it accepts (app.cli.commands.info_command runs it)."""

from __future__ import annotations

import argparse

from app.cli.arguments.arg_types import add_prompt_format_option
from app.cli.arguments.run_later import run_later


def add_info_command(commands: argparse._SubParsersAction) -> None:
    info = commands.add_parser(
        "info",
        help="show a model's inventory (sub-layers and their sizes), or the devices",
        description="Read a GGUF file's header (no weights are loaded) and print its "
        "architecture, sizes and per-block sub-layer table. With --devices: the llama.cpp "
        "backends loaded (or skipped, and why), the CPU variant chosen, every device and "
        "the GPU a model would use.",
    )
    info.add_argument("model", metavar="MODEL", nargs="?", help="GGUF file, or 'default'")
    info.add_argument(
        "--devices", action="store_true", help="show backends and devices instead of a model"
    )
    info.add_argument("--json", action="store_true", help="print the inventory as JSON")
    add_prompt_format_option(info)
    info.set_defaults(command="info", run=run_later("app.cli.commands.info_command", "run_info"))
