"""Lent computers on loopback for the tests of issue 31: this build's RPC server on a free
port, serving the CPU device with one thread, as `shardchat share --device CPU` runs it."""

from __future__ import annotations

import socket
from pathlib import Path

from engine.remote.sharing import ShareSettings, SharingServer


def free_port() -> int:
    """A loopback port nothing listened on a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def lent_computer(folder: Path) -> SharingServer:
    """An RPC server (not started) keeping its cache and log in `folder`."""
    return SharingServer(
        ShareSettings(port=free_port(), devices=("CPU",), threads=1),
        folder / "cache",
        folder / "rpc-server.log",
    )


def endpoint(server: SharingServer) -> str:
    return f"127.0.0.1:{server.settings.port}"
