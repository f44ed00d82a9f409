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

import contextlib
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from engine.errors import BadInputError

# The protocol version of the llama.cpp this app ships (ggml/include/ggml-rpc.h). A server
# of another version is refused: llama.cpp's client aborts on a major mismatch, and a
# patch level that differs means another set of ggml operations.
PROTOCOL_VERSION = (7, 0, 0)
CONNECT_TIMEOUT_S = 3.0
REPLY_TIMEOUT_S = 5.0

# the commands (enum rpc_cmd)
ALLOC_BUFFER, BUFFER_GET_BASE, FREE_BUFFER, SET_TENSOR, GET_TENSOR = 0, 3, 4, 6, 8
GET_DEVICE_MEMORY, HELLO, DEVICE_COUNT = 11, 14, 15
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
    with RpcSession.open(host, port, connect_timeout_s, reply_timeout_s) as session:
        return session.server


class RpcSession:
    """One connection to a checked server: HELLO answered in this build's version, its
    devices read. The server keeps what the session allocates until it closes."""

    def __init__(self, sock: socket.socket, host: str, port: int) -> None:
        self.sock, self.where = sock, f"{host}:{port}"
        version = self._hello()
        try:
            count = self._device_count()
            devices = tuple(self._device_memory(index) for index in range(count))
        except TimeoutError:
            raise RemoteUnreachable(
                f"{self.where} stopped answering during the handshake"
            ) from None
        self.server = RemoteServer(host, port, version, devices)

    @classmethod
    @contextlib.contextmanager
    def open(
        cls,
        host: str,
        port: int,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        reply_timeout_s: float = REPLY_TIMEOUT_S,
    ) -> Iterator[RpcSession]:
        where = f"{host}:{port}"
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        except TimeoutError:
            raise RemoteUnreachable(
                f"{where} did not answer within {connect_timeout_s:g} s"
            ) from None
        except OSError as exc:
            raise RemoteUnreachable(f"cannot reach {where}: {exc.strerror or exc}") from None
        with sock:
            sock.settimeout(reply_timeout_s)
            yield cls(sock, host, port)

    def call(self, command: int, payload: bytes, size: int) -> bytes:
        """Send one command, read its reply of exactly `size` bytes. TimeoutError when the
        server says nothing in time; RemoteRefused for anything but a reply of that size."""
        try:
            self.send(command, payload)
            (reply_size,) = struct.unpack("<Q", self._read(8))
            if reply_size != size:
                raise RemoteRefused(
                    f"{self.where} is not a llama.cpp RPC server this build can use "
                    f"(a {reply_size}-byte reply where {size} were expected)"
                )
            return self._read(size)
        except TimeoutError:
            raise
        except OSError as exc:
            raise RemoteRefused(
                f"{self.where} closed the connection ({exc.strerror or exc}): "
                "not a llama.cpp RPC server of this version"
            ) from None

    def send(self, command: int, payload: bytes) -> None:
        """Send one command that has no reply."""
        self.sock.sendall(struct.pack("<BQ", command, len(payload)) + payload)

    def device_count(self) -> int:
        """A round trip that does nothing on the server: for timing the link."""
        return self._device_count()

    def _hello(self) -> tuple[int, int, int]:
        try:
            reply = self.call(HELLO, bytes(_CONN_CAPS), _HELLO_REPLY)
        except TimeoutError:
            raise RemoteBusy(
                f"{self.where} took the connection but did not answer: it is serving "
                "another computer"
            ) from None
        major, minor, patch = reply[0], reply[1], reply[2]
        version = (major, minor, patch)
        if version != PROTOCOL_VERSION:
            raise RemoteRefused(
                f"{self.where} runs llama.cpp's RPC protocol {_dotted(version)}, this build "
                f"speaks {_dotted(PROTOCOL_VERSION)}: run the same ShardChat version on both "
                "computers"
            )
        return version

    def _device_count(self) -> int:
        (count,) = struct.unpack("<I", self.call(DEVICE_COUNT, b"", 4))
        if not 0 < count <= _MAX_DEVICES:
            raise RemoteRefused(f"{self.where} reports {count} devices")
        return int(count)

    def _device_memory(self, index: int) -> RemoteDevice:
        reply = self.call(GET_DEVICE_MEMORY, struct.pack("<I", index), 16)
        free, total = struct.unpack("<QQ", reply)
        return RemoteDevice(index, int(free), int(total))

    def _read(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self.sock.recv(min(size - len(data), 1 << 20))
            if not chunk:
                raise RemoteRefused(
                    f"{self.where} closed the connection during the handshake: "
                    "not a llama.cpp RPC server of this version"
                )
            data += chunk
        return bytes(data)


def _dotted(version: tuple[int, int, int]) -> str:
    return ".".join(str(part) for part in version)
