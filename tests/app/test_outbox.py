"""The Outbox wakes the server's loop once for a step's events, and at once for a lone one.

A real asyncio loop runs on its own thread, as the server's does; the only thing added
is a count of its self-pipe writes (the tests' own calls into it); the Outbox's wake-ups
are its doorbell's rings (app.api.loop_doorbell).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from loop_threads import running

from app.api.api_errors import ApiError
from app.api.api_streams import ApiStreams
from app.api.engine_calls import ApiEvent, ApiFailed
from app.api.outbox import Outbox


class CountedLoop(asyncio.SelectorEventLoop):
    """asyncio's own loop, counting the wake-ups other threads ask of it."""

    wakes = 0

    def _write_to_self(self) -> None:
        self.wakes += 1
        super()._write_to_self()


@pytest.fixture
def loop() -> Iterator[CountedLoop]:
    with running(CountedLoop()) as started:
        yield started


@pytest.fixture
def outbox(loop: CountedLoop) -> Iterator[Outbox]:
    """Made on the loop's thread, as the server makes it."""

    async def make() -> Outbox:
        return Outbox(loop)

    made = asyncio.run_coroutine_threadsafe(make(), loop).result(timeout=10)
    yield made
    made.close()


def settled(loop: asyncio.AbstractEventLoop) -> None:
    """Wait until the loop has run everything scheduled before this call."""

    async def nothing() -> None:
        return None

    asyncio.run_coroutine_threadsafe(nothing(), loop).result(timeout=10)


def queues(loop: asyncio.AbstractEventLoop, n: int) -> list[asyncio.Queue[ApiEvent]]:
    async def make() -> list[asyncio.Queue[ApiEvent]]:
        return [asyncio.Queue() for _ in range(n)]

    return asyncio.run_coroutine_threadsafe(make(), loop).result(timeout=10)


def event(n: int) -> ApiEvent:
    return ApiFailed(ApiError(500, f"event {n}", "server_error"))


def messages(queue: asyncio.Queue[ApiEvent]) -> list[str]:
    said = []
    while not queue.empty():
        failed = queue.get_nowait()
        assert isinstance(failed, ApiFailed)
        said.append(failed.error.message)
    return said


def test_a_steps_events_reach_the_loop_in_one_wake_up_when_the_step_has_handed_them_out(
    loop: CountedLoop, outbox: Outbox
) -> None:
    targets = queues(loop, 8)
    settled(loop)
    before, rings = loop.wakes, outbox.doorbell.rings
    with outbox.together():
        for n, queue in enumerate(targets):
            outbox.put(queue, event(n))
            outbox.put(queue, event(100 + n))
        settled(loop)  # the loop ran meanwhile, and was handed nothing
        assert all(queue.empty() for queue in targets)
    settled(loop)
    assert [messages(q) for q in targets] == [[f"event {n}", f"event {100 + n}"] for n in range(8)]
    assert outbox.doorbell.rings - rings == 1  # one wake-up for the flush
    assert loop.wakes - before == 2  # the two settles' coroutines


def test_an_event_outside_a_step_wakes_the_loop_at_once(loop: CountedLoop, outbox: Outbox) -> None:
    (queue,) = queues(loop, 1)
    outbox.put(queue, event(1))
    settled(loop)
    assert messages(queue) == ["event 1"]


def test_events_put_by_another_thread_during_a_step_go_with_the_steps(
    loop: CountedLoop, outbox: Outbox
) -> None:
    mine, theirs = queues(loop, 2)
    with outbox.together():
        outbox.put(mine, event(1))
        other = threading.Thread(target=outbox.put, args=(theirs, event(2)))
        other.start()
        other.join(10)
        settled(loop)
        assert mine.empty() and theirs.empty()
    settled(loop)
    assert (messages(mine), messages(theirs)) == (["event 1"], ["event 2"])


def test_the_api_holds_a_steps_events_until_the_next_step_starts_computing(
    loop: CountedLoop, outbox: Outbox
) -> None:
    """The worker releases them from the scheduler's before_decode: the loop then writes
    while llama.cpp computes, not while the worker builds the step."""
    (queue,) = queues(loop, 1)
    api = ApiStreams()
    api.deliveries.append(outbox.together)
    api.advance(None)  # before a step: what the streams said is sent
    outbox.put(queue, event(1))  # as a stream's pump does while it is sent
    settled(loop)
    assert queue.empty()
    api.release()
    settled(loop)
    assert messages(queue) == ["event 1"]
    api.release()  # a second release (after the step) has nothing left to hand over
    outbox.put(queue, event(2))  # outside any step: at once
    settled(loop)
    assert messages(queue) == ["event 2"]
