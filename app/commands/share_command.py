"""`shardchat share`: lend this computer's devices to ShardChat on another computer.

It runs llama.cpp's RPC server from this build until Ctrl-C (or SIGTERM), which stops
it: nothing stays lent after the command ends. By default the server listens on
127.0.0.1 only, and the other computer reaches it through an SSH forward made with the
user's own SSH key (`shardchat devices add ssh://user@this-computer`). `--listen
ADDRESS` serves one network interface directly, with a warning: the RPC protocol has no
password and has had remote exploits, so anyone on that network could use, or attack,
this computer.
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

from app.commands.arg_types import positive_int
from app.paths import app_paths
from app.stop_signals import on_signal
from engine.remote.addresses import DEFAULT_RPC_PORT
from engine.remote.rpc_probe import RemoteServer
from engine.remote.sharing import LOOPBACK, ShareSettings, SharingServer


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
    share.set_defaults(command="share", run=run_share)


def run_share(args: argparse.Namespace) -> int:
    settings = ShareSettings(
        host=args.listen,
        port=args.port,
        threads=args.threads,
        devices=tuple(args.device),
        cache=not args.no_cache,
    )
    paths = app_paths().ensure()
    server = SharingServer(settings, paths.lent_tensors_dir, paths.rpc_server_log)
    if settings.on_network:
        print(_network_warning(settings), file=sys.stderr)
    with on_signal(signal.SIGTERM, _interrupt):  # SIGTERM stops sharing as Ctrl-C does
        try:
            lent = server.start()
            print(_lending(settings, lent), flush=True)
            code = server.wait()
            print(
                f"shardchat: error: the RPC server stopped by itself (exit {code}): "
                f"{server.last_words()}",
                file=sys.stderr,
            )
            return 1
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
    print("Stopped sharing this computer.", flush=True)
    return 0


def _lending(settings: ShareSettings, lent: RemoteServer) -> str:
    version = ".".join(str(part) for part in lent.version)
    lines = [f"Lending this computer on {lent.endpoint} (llama.cpp RPC protocol {version})."]
    for device in lent.devices:
        free, total = device.free_bytes / 2**30, device.total_bytes / 2**30
        lines.append(f"  device {device.index}: {free:.1f} GiB free of {total:.1f} GiB")
    if settings.on_network:
        lines.append(f"On the other computer: shardchat devices add tcp://{lent.endpoint}")
    else:
        lines.append("Only this computer can reach it. On the other computer:")
        port = "" if settings.port == DEFAULT_RPC_PORT else f" --rpc-port {settings.port}"
        lines.append(f"  shardchat devices add ssh://USER@THIS-COMPUTER{port}")
    lines.append("Stop sharing with Ctrl-C.")
    return "\n".join(lines)


def _network_warning(settings: ShareSettings) -> str:
    return (
        f"shardchat: warning: anyone who can reach {settings.host} can use this computer "
        f"through port {settings.port}: llama.cpp's RPC server has no password and has had "
        "remote exploits. Use it on a network you trust, or share on 127.0.0.1 through SSH."
    )


def _interrupt(_number: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt
