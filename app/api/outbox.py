"""The engine worker's events handed to the server's loop, a step's worth in one wake-up.

Since the worker writes a stream's text to its socket itself (app.api.reply_channel),
what goes this way is a request's start and end, its failures, and whole replies.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

from app.api.loop_doorbell import LoopDoorbell

T = TypeVar("T")


class Outbox:
    """Events from the worker's thread into the requests' queues on the server's loop.

    Each wake-up of the loop is a thread that takes a core from llama.cpp's threads in
    the middle of the next step, and the one it takes stalls the other at the step's
    next barrier: woken per event, the loop preempted them 616 times in 8 s of serving
    8 clients, and 147 times once woken per step (`bench/decode_under_app.py`).
    So the worker hands out a step's events inside `together()`, and the loop wakes
    once a step to take them all. The worker keeps the block open until llama.cpp
    starts the next step (ApiStreams.release), so the loop writes while the step
    computes, without the GIL llama_decode has let go; the wake-up itself keeps the
    GIL (LoopDoorbell), or the loop takes it before the worker reaches llama_decode.
    An event put outside a block (an error while the server stops) wakes the loop at
    once. A stream under way sends its text past the Outbox (app.api.reply_channel),
    so most steps wake the loop not at all."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        """Made on the loop's thread, as its doorbell must be."""
        self.doorbell = LoopDoorbell(loop, self._flush)
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Queue[Any], Any]] = []
        self._held = 0  # how many `together()` blocks are open
        self._flush_due = False  # a flush is on its way to the loop

    def put(self, queue: asyncio.Queue[T], event: T) -> None:
        with self._lock:
            self._pending.append((queue, event))
            wake = self._due_now()
        if wake:
            self._wake()

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """The events put inside reach the loop in one wake-up, when the block ends."""
        with self._lock:
            self._held += 1
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1
                wake = self._due_now()
            if wake:
                self._wake()

    def _due_now(self) -> bool:
        """Under the lock: whether the caller should schedule the flush."""
        if self._held or self._flush_due or not self._pending:
            return False
        self._flush_due = True
        return True

    def _wake(self) -> None:
        self.doorbell.ring()

    def close(self) -> None:
        """Once the loop has stopped: later events wake nothing."""
        self.doorbell.close()

    def _flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
            self._flush_due = False
        for queue, event in pending:
            queue.put_nowait(event)
