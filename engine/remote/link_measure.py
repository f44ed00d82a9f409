"""How fast the link to a lent computer is, measured through its RPC server.

The planner costs what crosses each hop per step (the activations, n_embd x tokens x
4 bytes each way) and the one-time weight transfer at load, so it needs the round
trip and the bandwidth both ways. They are measured the way llama.cpp uses the link:
a buffer is allocated on the lent device, a tensor is written into it (SET_TENSOR,
then a round trip that can only be answered once the write is done) and read back
(GET_TENSOR), each timed; the round trip is a command the server answers at once.
The buffer belongs to this connection, and the server frees it when it closes.
"""

from __future__ import annotations

import statistics
import struct
import time
from dataclasses import dataclass

from engine.remote.rpc_probe import (
    ALLOC_BUFFER,
    BUFFER_GET_BASE,
    FREE_BUFFER,
    GET_TENSOR,
    SET_TENSOR,
    RemoteRefused,
    RpcSession,
)

TRANSFER_BYTES = 16 * 2**20
ROUND_TRIPS = 9
_GGML_TYPE_F32 = 0
# struct rpc_tensor, packed: id, type, buffer, ne[4], nb[4], op, op_params[16], flags,
# src[10], view_src, view_offs, data, name[64], use_count
_RPC_TENSOR = struct.Struct("<QIQ4I4II16ii10QQQQ64si")


@dataclass(frozen=True)
class LinkFigures:
    round_trip_s: float
    upload_bytes_per_s: float  # this computer to the lent one
    download_bytes_per_s: float

    def describe(self) -> str:
        up, down = self.upload_bytes_per_s * 8 / 1e9, self.download_bytes_per_s * 8 / 1e9
        return (
            f"round trip {self.round_trip_s * 1000:.2f} ms, {up:.2f} Gbit/s up, "
            f"{down:.2f} Gbit/s down"
        )


def measure_link(session: RpcSession, size: int = TRANSFER_BYTES) -> LinkFigures:
    """Round trip and bandwidth both ways to the session's server (device 0)."""
    round_trip = _round_trip(session)
    buffer, base = _allocate(session, size)
    try:
        tensor = _tensor(buffer, base, size)
        data = bytes(size)
        started = time.perf_counter()
        session.send(SET_TENSOR, tensor + b"\x00" + struct.pack("<Q", 0) + data)
        session.device_count()  # answered once the write is done
        upload = time.perf_counter() - started - round_trip
        started = time.perf_counter()
        session.call(GET_TENSOR, tensor + struct.pack("<QQ", 0, size), size)
        download = time.perf_counter() - started - round_trip
    finally:
        session.send(FREE_BUFFER, struct.pack("<Q", buffer))
    floor = 1e-6  # a loopback transfer can take less than the round trip's noise
    return LinkFigures(round_trip, size / max(upload, floor), size / max(download, floor))


def _round_trip(session: RpcSession) -> float:
    times = []
    for _ in range(ROUND_TRIPS):
        started = time.perf_counter()
        session.device_count()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _allocate(session: RpcSession, size: int) -> tuple[int, int]:
    reply = session.call(ALLOC_BUFFER, struct.pack("<IQ", 0, size), 16)
    buffer, allocated = struct.unpack("<QQ", reply)
    if buffer == 0 or allocated < size:
        raise RemoteRefused(
            f"{session.where} could not allocate {size >> 20} MiB to measure the link"
        )
    (base,) = struct.unpack("<Q", session.call(BUFFER_GET_BASE, struct.pack("<Q", buffer), 8))
    return buffer, base


def _tensor(buffer: int, base: int, size: int) -> bytes:
    """A flat f32 tensor covering `size` bytes of the buffer from its base."""
    return _RPC_TENSOR.pack(
        1, _GGML_TYPE_F32, buffer,
        size // 4, 1, 1, 1,
        4, size, size, size,
        0, *([0] * 16), 0,
        *([0] * 10), 0, 0, base,
        b"shardchat-link", 0,
    )  # fmt: skip
