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

from app.paths import app_paths
from app.stop_signals import on_signal
from engine.remote.addresses import DEFAULT_RPC_PORT
from engine.remote.rpc_probe import RemoteServer
from engine.remote.sharing import ShareSettings, SharingServer


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
