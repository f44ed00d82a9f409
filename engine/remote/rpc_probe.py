"""A look at a llama.cpp RPC server through a connection of our own, before the engine uses it.

llama.cpp's in-process RPC client aborts the whole process when it cannot connect,
when the handshake fails (another protocol version) or when a server dies mid-call.
So nothing reaches it unprobed: this speaks the first three commands of the protocol
(ggml/src/ggml-rpc/ggml-rpc.cpp: HELLO, DEVICE_COUNT, GET_DEVICE_MEMORY) over a socket
with a bounded time for every step, and turns each way of failing into one sentence.

A server serves one client at a time and queues the rest, so a server busy with
another computer accepts the connection and then says nothing: that is a timeout on
the handshake, reported as busy rather than as broken.

The wire format: a request is a command byte, a little-endian u64 size and that many
bytes; a reply is a u64 size and that many bytes.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from engine.errors import BadInputError

# The protocol version of the llama.cpp this app ships (ggml/include/ggml-rpc.h). A server
# of another version is refused: llama.cpp's client aborts on a major mismatch, and a
# patch level that differs means another set of ggml operations.
PROTOCOL_VERSION = (7, 0, 0)
CONNECT_TIMEOUT_S = 3.0
REPLY_TIMEOUT_S = 5.0

_HELLO, _DEVICE_COUNT, _GET_DEVICE_MEMORY = 14, 15, 11
_CONN_CAPS = 24  # bytes of transport capabilities in HELLO; zeros ask for plain TCP
_HELLO_REPLY = 4 + _CONN_CAPS
_MAX_DEVICES = 64


class RemoteError(BadInputError):
    """A lent computer that cannot be used; the message says why, in one line (exit 2:
    the address given does not lead to a usable server)."""


class RemoteUnreachable(RemoteError):
    """Nothing answers at the address: no route, refused, or no answer in time."""


class RemoteRefused(RemoteError):
    """Something answers, but not as a llama.cpp RPC server this app can use."""


class RemoteBusy(RemoteError):
    """The server took the connection but is serving another computer."""


@dataclass(frozen=True)
class RemoteDevice:
    """One device of a lent computer, as its server reports it."""

    index: int  # on that server
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class RemoteServer:
    """What a probe learnt: the server's protocol version and its devices."""

    host: str
    port: int
    version: tuple[int, int, int]
    devices: tuple[RemoteDevice, ...]

    @property
    def endpoint(self) -> str:
        """host:port, as llama.cpp's RPC backend names a server."""
        return f"{self.host}:{self.port}"


def probe(
    host: str,
    port: int,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    reply_timeout_s: float = REPLY_TIMEOUT_S,
) -> RemoteServer:
    """The server at host:port, checked to be one this build's RPC client can use safely."""
    where = f"{host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=connect_timeout_s)
    except TimeoutError:
        raise RemoteUnreachable(f"{where} did not answer within {connect_timeout_s:g} s") from None
    except OSError as exc:
        raise RemoteUnreachable(f"cannot reach {where}: {exc.strerror or exc}") from None
    with sock:
        sock.settimeout(reply_timeout_s)
        version = _hello(sock, where)
        try:
            count = _device_count(sock, where)
            devices = tuple(_device_memory(sock, where, index) for index in range(count))
        except TimeoutError:
            raise RemoteUnreachable(f"{where} stopped answering during the handshake") from None
    return RemoteServer(host, port, version, devices)


def _hello(sock: socket.socket, where: str) -> tuple[int, int, int]:
    try:
        reply = _call(sock, _HELLO, bytes(_CONN_CAPS), _HELLO_REPLY, where)
    except TimeoutError:
        raise RemoteBusy(
            f"{where} took the connection but did not answer: it is serving another computer"
        ) from None
    major, minor, patch = reply[0], reply[1], reply[2]
    version = (major, minor, patch)
    if version != PROTOCOL_VERSION:
        raise RemoteRefused(
            f"{where} runs llama.cpp's RPC protocol {_dotted(version)}, this build speaks "
            f"{_dotted(PROTOCOL_VERSION)}: run the same ShardChat version on both computers"
        )
    return version


def _device_count(sock: socket.socket, where: str) -> int:
    (count,) = struct.unpack("<I", _call(sock, _DEVICE_COUNT, b"", 4, where))
    if not 0 < count <= _MAX_DEVICES:
        raise RemoteRefused(f"{where} reports {count} devices")
    return int(count)


def _device_memory(sock: socket.socket, where: str, index: int) -> RemoteDevice:
    reply = _call(sock, _GET_DEVICE_MEMORY, struct.pack("<I", index), 16, where)
    free, total = struct.unpack("<QQ", reply)
    return RemoteDevice(index, int(free), int(total))


def _call(sock: socket.socket, command: int, payload: bytes, size: int, where: str) -> bytes:
    """Send one command, read its reply of exactly `size` bytes. Raises TimeoutError when
    the server says nothing in time; RemoteRefused for anything but a reply of that size."""
    try:
        sock.sendall(struct.pack("<BQ", command, len(payload)) + payload)
        (reply_size,) = struct.unpack("<Q", _read(sock, 8, where))
        if reply_size != size:
            raise RemoteRefused(
                f"{where} is not a llama.cpp RPC server this build can use "
                f"(a {reply_size}-byte reply where {size} were expected)"
            )
        return _read(sock, size, where)
    except TimeoutError:
        raise
    except OSError as exc:
        raise RemoteRefused(
            f"{where} closed the connection during the handshake ({exc.strerror or exc}): "
            "not a llama.cpp RPC server of this version"
        ) from None


def _read(sock: socket.socket, size: int, where: str) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise RemoteRefused(
                f"{where} closed the connection during the handshake: "
                "not a llama.cpp RPC server of this version"
            )
        data += chunk
    return bytes(data)


def _dotted(version: tuple[int, int, int]) -> str:
    return ".".join(str(part) for part in version)
