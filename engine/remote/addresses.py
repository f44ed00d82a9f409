"""Where a lent computer is: `tcp://host:port` (its RPC server, straight) or
`ssh://[user@]host[:port]` (its RPC server on its own 127.0.0.1, through an SSH forward).

The canonical form is the key a remote is stored under, so the same computer typed
two ways is one entry.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from engine.errors import BadInputError

LOOPBACK = "127.0.0.1"  # where a computer lent from this one listens unless told otherwise

DEFAULT_RPC_PORT = 50052  # llama.cpp's rpc-server default, and `shardchat share`'s
DEFAULT_SSH_PORT = 22
_SCHEMES = ("tcp", "ssh")


@dataclass(frozen=True)
class RemoteAddress:
    scheme: str  # "tcp" or "ssh"
    host: str
    rpc_port: int  # the RPC server's port: on `host` (tcp) or on its loopback (ssh)
    user: str | None = None  # ssh only
    ssh_port: int = DEFAULT_SSH_PORT

    @property
    def through_ssh(self) -> bool:
        return self.scheme == "ssh"

    def __str__(self) -> str:
        if not self.through_ssh:
            return f"tcp://{_bracketed(self.host)}:{self.rpc_port}"
        text = f"ssh://{self.user}@{_bracketed(self.host)}:{self.ssh_port}"
        return text if self.rpc_port == DEFAULT_RPC_PORT else f"{text}?rpc-port={self.rpc_port}"


def parse_address(text: str, rpc_port: int | None = None) -> RemoteAddress:
    """A remote's address, or BadInputError saying what is wrong with it. `rpc_port`, when
    given, is the RPC server's port for an ssh:// address (its `?rpc-port=` otherwise)."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError as exc:
        raise BadInputError(f"not a remote address: {text!r} ({exc})") from None
    if parts.scheme not in _SCHEMES or not parts.hostname:
        raise BadInputError(
            f"not a remote address: {text!r} (expected tcp://HOST:PORT or ssh://USER@HOST)"
        )
    if parts.path not in ("", "/") or parts.fragment:
        raise BadInputError(f"not a remote address: {text!r} (unexpected {parts.path!r})")
    query = parse_qs(parts.query)
    if parts.scheme == "tcp":
        if parts.username or query:
            raise BadInputError(f"a tcp:// address takes a host and a port only: {text!r}")
        return RemoteAddress("tcp", parts.hostname, port or rpc_port or DEFAULT_RPC_PORT)
    return RemoteAddress(
        "ssh",
        parts.hostname,
        _checked_port(rpc_port or _query_port(query, text) or DEFAULT_RPC_PORT),
        user=parts.username or getpass.getuser(),
        ssh_port=port or DEFAULT_SSH_PORT,
    )


def _query_port(query: dict[str, list[str]], text: str) -> int | None:
    unknown = set(query) - {"rpc-port"}
    if unknown:
        raise BadInputError(f"unknown option {sorted(unknown)[0]!r} in {text!r}")
    values = query.get("rpc-port")
    if not values:
        return None
    try:
        return int(values[-1])
    except ValueError:
        raise BadInputError(f"not a port: rpc-port={values[-1]!r}") from None


def _checked_port(port: int) -> int:
    if not 0 < port < 65536:
        raise BadInputError(f"not a port: {port}")
    return port


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host
