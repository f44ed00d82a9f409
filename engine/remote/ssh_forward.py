"""An SSH local forward to a lent computer's RPC server, which listens on that computer's
127.0.0.1 only (`shardchat share`'s default).

It runs the system's `ssh`, so the user's own keys, agent, known hosts and
~/.ssh/config apply and nothing of ours holds a secret. BatchMode: ssh never asks
anything on a terminal (an unknown host key or a missing key is an error, said in
ssh's own words), and ExitOnForwardFailure: ssh ends rather than run without the
forward.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from engine.errors import ShardChatError
from engine.remote.addresses import RemoteAddress
from engine.remote.processes import end_process, start_kept
from engine.remote.rpc_probe import RemoteUnreachable

OPEN_TIMEOUT_S = 15.0


def ssh_client() -> str:
    """The system's OpenSSH client: on PATH, or on Windows where its optional feature puts
    it (System32\\OpenSSH, on PATH unless a user's PATH lost it)."""
    found = shutil.which("ssh")
    if found is None and sys.platform == "win32":
        system = Path(os.environ.get("SYSTEMROOT", r"C:\Windows")) / "System32" / "OpenSSH"
        found = shutil.which("ssh", path=str(system))
    if found is None:
        if sys.platform == "win32":
            raise ShardChatError(
                "no ssh command on this computer (add Windows' OpenSSH Client: Settings, "
                "System, Optional features)"
            )
        raise ShardChatError("no ssh command on this computer (install OpenSSH's client)")
    return found


class SshForward:
    """`ssh -N -L 127.0.0.1:LOCAL:127.0.0.1:RPC_PORT user@host`, while open."""

    def __init__(self, address: RemoteAddress, options: Sequence[str] = ()) -> None:
        """`options`: more `-o` settings for ssh (an identity file, a known-hosts file)."""
        if not address.through_ssh:
            raise ValueError(f"not an ssh:// address: {address}")
        self.address = address
        self.options = tuple(options)
        self.local_port = 0
        self._process: subprocess.Popen[bytes] | None = None

    def command(self, local_port: int) -> list[str]:
        ssh = ssh_client()
        address = self.address
        settings = [
            "BatchMode=yes",
            "ExitOnForwardFailure=yes",
            f"ConnectTimeout={int(OPEN_TIMEOUT_S)}",
            "ServerAliveInterval=15",
            *self.options,
        ]
        return [
            ssh,
            "-N",
            "-p",
            str(address.ssh_port),
            "-L",
            f"127.0.0.1:{local_port}:127.0.0.1:{address.rpc_port}",
            *(part for setting in settings for part in ("-o", setting)),
            f"{address.user}@{address.host}",
        ]

    def open(self, timeout_s: float = OPEN_TIMEOUT_S) -> int:
        """Open the forward; the local port that reaches the remote's RPC server. An
        unreachable host, a refused key or an unknown host key is RemoteUnreachable in
        ssh's own words."""
        self.local_port = _free_local_port()
        self._process = start_kept(
            self.command(self.local_port),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,  # a few lines at most: read once ssh has ended
        ).process
        deadline = time.monotonic() + timeout_s
        while not _accepts(self.local_port):
            if self._process.poll() is not None:
                said = _last_line(self._process)
                self.close()
                raise RemoteUnreachable(f"ssh to {self._who()} failed: {said}")
            if time.monotonic() > deadline:
                self.close()
                raise RemoteUnreachable(f"ssh to {self._who()} did not connect in {timeout_s:g} s")
            time.sleep(0.05)  # ssh says nothing when the forward is up: the port is the sign
        return self.local_port

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        end_process(process)
        if process.stderr is not None:
            process.stderr.close()

    def __enter__(self) -> SshForward:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _who(self) -> str:
        return f"{self.address.user}@{self.address.host}:{self.address.ssh_port}"


def _last_line(process: subprocess.Popen[bytes]) -> str:
    """What an ended ssh said last, warnings aside."""
    text = process.stderr.read().decode(errors="replace") if process.stderr else ""
    said = [line.strip() for line in text.splitlines() if line.strip()]
    said = [line for line in said if not line.startswith("Warning:")] or said
    return said[-1] if said else "ssh ended without a word"


def _free_local_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False
