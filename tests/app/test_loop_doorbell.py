"""The doorbell wakes a real asyncio loop from another thread, and the ringer keeps the GIL.

Keeping the GIL is what it is for: the engine worker rings just before llama_decode,
and the loop must not take the GIL before the worker is inside it. The Python a
thread runs between two calls that let the GIL go runs without another thread's
Python in between, so a callback of the loop's cannot have run right after a ring
that kept the GIL; after asyncio's own wake-up (socket.send lets the GIL go) it
often has.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Iterator

import pytest
from loop_threads import running

from app.api.loop_doorbell import LoopDoorbell

WAIT_S = 10.0


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    with running(asyncio.SelectorEventLoop()) as started:
        yield started


def made_on(loop: asyncio.AbstractEventLoop, on_ring: Callable[[], None]) -> LoopDoorbell:
    """Made on the loop's thread, as the server makes its own."""

    async def make() -> LoopDoorbell:
        return LoopDoorbell(loop, on_ring)

    return asyncio.run_coroutine_threadsafe(make(), loop).result(timeout=WAIT_S)


def test_a_ring_from_another_thread_runs_the_callback_on_the_loop(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rung = threading.Event()
    threads: list[str] = []

    def on_ring() -> None:
        threads.append(threading.current_thread().name)
        rung.set()

    bell = made_on(loop, on_ring)
    try:
        assert bell.keeps_the_gil
        for _ in range(3):  # the loop reads each ring, so the next one wakes it again
            rung.clear()
            bell.ring()
            assert rung.wait(WAIT_S)
        assert len(threads) == 3 and threading.current_thread().name not in threads
    finally:
        bell.close()


def test_the_ringing_thread_keeps_the_gil_from_a_loop_that_wants_it(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """The loop busy in Python, as the server's is while it writes: a ring that let the GIL
    go would hand it to the loop in the middle of the ring. The switch interval is made
    long, so that CPython's own turn-taking does not hand it over in the middle instead."""
    bell = made_on(loop, lambda: None)
    busy, spins, stop = threading.Event(), [0], threading.Event()

    def spin() -> None:  # on the loop: Python that wants the GIL until told to stop
        busy.set()
        while not stop.is_set():
            spins[0] += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.5)
    try:
        loop.call_soon_threadsafe(spin)
        assert busy.wait(WAIT_S)
        loop_ran_in_a_ring = 0
        for _ in range(200):
            before = spins[0]
            bell.ring()
            loop_ran_in_a_ring += spins[0] != before
        stop.set()
        assert loop_ran_in_a_ring == 0
    finally:
        stop.set()
        sys.setswitchinterval(interval)
        bell.close()


class ReaderlessLoop(asyncio.SelectorEventLoop):
    """A loop that cannot watch sockets, as Windows' proactor loop cannot."""

    def add_reader(self, *args: object) -> None:
        raise NotImplementedError


def test_a_loop_without_readers_is_woken_the_asyncio_way() -> None:
    loop = ReaderlessLoop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    rung = threading.Event()
    try:
        bell = made_on(loop, rung.set)
        assert not bell.keeps_the_gil
        bell.ring()
        assert rung.wait(WAIT_S)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_S)
        loop.close()


def test_a_ring_after_the_loop_closed_reaches_nothing_and_raises_nothing() -> None:
    """The server closes its doorbell once the loop stopped; a late event's ring is lost."""
    loop = asyncio.SelectorEventLoop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    rung = threading.Event()
    bell = made_on(loop, rung.set)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(WAIT_S)
    loop.close()
    bell.close()
    bell.ring()
    bell.close()  # twice is harmless
    assert not bell.keeps_the_gil and not rung.is_set()
