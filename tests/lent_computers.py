"""Lent computers on loopback for the tests of issue 31: this build's RPC server on a free
port, serving the CPU device with one thread, as `shardchat share --device CPU` runs it."""

from __future__ import annotations

import socket
from pathlib import Path

import psutil

from engine.model.inventory import read_inventory
from engine.remote.sharing import ShareSettings, SharingServer

STORY = "Write a long story about a dragon who learns to bake bread."  # a long reply


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


def here_budget(default_model_file: Path) -> str:
    """Room for the globals and ten blocks: the rest must go to the lent computers."""
    inventory = read_inventory(str(default_model_file))
    block = inventory.blocks[0].n_bytes + inventory.blocks[0].kv_cache_bytes(4096)
    return str(sum(s.n_bytes for s in inventory.globals) + 10 * block + block // 2)


def port(address: str) -> str:
    return address.rsplit(":", 1)[1]


def kill_server(address: str) -> None:
    """Kill the lent computer at `address` (a child of this process) as a crash would."""
    (server,) = [
        p for p in psutil.Process().children()
        if p.status() != psutil.STATUS_ZOMBIE  # one killed before
        and p.name() == "ggml-rpc-server" and port(address) in p.cmdline()
    ]  # fmt: skip
    server.kill()
