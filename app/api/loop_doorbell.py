"""Wake the server's asyncio loop from the engine worker without letting go of the GIL.

asyncio's own way in from another thread, `call_soon_threadsafe`, writes a byte to
the loop's self-pipe with `socket.send`, which lets the GIL go for the system call.
The loop's thread wakes on that byte, takes the GIL, and writes its clients' events
in Python before it lets it go again; the worker, back from `send`, waits all that
time before it can enter llama_decode. The worker wakes the loop just before each
step (ApiStreams.release), so the loop's writes were meant to run while llama.cpp
computes: at one client 79% of them ran between steps instead, and the worker's
`send` took 0.51 ms of each 8 ms token (docs/measurements.md, "The loop's wake-up
keeps the GIL").

The doorbell is a socket pair of its own, read by the loop (`add_reader`), and rung
through libc's `send` called by `ctypes.PyDLL`, which keeps the GIL: the worker goes
on into llama_decode, whose ctypes call lets the GIL go, and only then does the loop
take it. Where the loop has no readers (Windows' proactor loop) or libc cannot be
called so, it rings through `call_soon_threadsafe` as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any


def _gil_keeping_send() -> Callable[[int, bytes, int, int], int] | None:
    """libc's send(2), called with the GIL held; None where libc is not reachable so."""
    if sys.platform == "win32":
        return None
    try:
        send: Any = ctypes.PyDLL(None).send
    except (OSError, AttributeError):
        return None
    send.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
    send.restype = ctypes.c_ssize_t
    return send


_SEND = _gil_keeping_send()


class LoopDoorbell:
    """Runs `on_ring` on `loop` once after one or more `ring()`s from any thread.

    Made on the loop's thread (it registers a reader); closed once the loop has stopped."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_ring: Callable[[], None]) -> None:
        self._loop = loop
        self._on_ring = on_ring
        self.rings = 0  # how many times the loop was woken (tests read it)
        self._lock = threading.Lock()  # a ring and the close: never the socket once closed
        self._pair: tuple[socket.socket, socket.socket] | None = None
        if _SEND is not None:
            self._pair = self._listening_pair(loop)

    @property
    def keeps_the_gil(self) -> bool:
        """Whether ringing keeps the GIL (False: asyncio's own wake-up)."""
        return self._pair is not None

    def ring(self) -> None:
        """Wake the loop to run `on_ring`; returns without letting the GIL go."""
        with self._lock:  # uncontended but for close(): taken without letting the GIL go
            self.rings += 1
            if self._pair is not None and _SEND is not None:
                # -1 with EAGAIN: the pair is full of rings the loop has yet to read
                _SEND(self._pair[1].fileno(), b"\0", 1, 0)
                return
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
            self._loop.call_soon_threadsafe(self._on_ring)

    def close(self) -> None:
        """Stop listening; later rings go the asyncio way (to a closed loop: nowhere)."""
        with self._lock:
            pair, self._pair = self._pair, None
        if pair is None:
            return
        reader, writer = pair
        with contextlib.suppress(RuntimeError):  # the loop is closed already
            self._loop.remove_reader(reader.fileno())
        reader.close()
        writer.close()

    def _listening_pair(
        self, loop: asyncio.AbstractEventLoop
    ) -> tuple[socket.socket, socket.socket] | None:
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        try:
            loop.add_reader(reader.fileno(), self._rung)
        except NotImplementedError:  # a loop without readers: asyncio's wake-up instead
            reader.close()
            writer.close()
            return None
        return reader, writer

    def _rung(self) -> None:
        pair = self._pair
        if pair is None:
            return
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while pair[0].recv(4096):
                pass
        self._on_ring()
