"""A request's events from the engine worker, written to its client: one JSON body or SSE.

The worker's thread hands events to the server's loop through an `Outbox`;
a route then waits on its queue and writes the reply `ReplyBuilder` shapes,
either whole (`write_whole`) or as server-sent events (`write_stream`). An
error before the first token is a plain HTTP error (the route raises it);
after it, the stream is already 200 and the error goes out as its last chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from app.api.engine_calls import ApiDelta, ApiEvent, ApiFailed, ApiFinished
from app.api.loop_doorbell import LoopDoorbell
from app.api.middlewares import USAGE_WORDS
from app.api.openai_replies import ReplyBuilder, total_usage


class Outbox:
    """Events from the worker's thread into the requests' queues on the server's loop.

    The worker sends one event per stream per step. Each wake-up of the loop is a
    thread that takes a core from llama.cpp's threads in the middle of the next step,
    and the one it takes stalls the other at the step's next barrier: woken per event,
    the loop preempted them 616 times in 8 s of serving 8 clients, and 147 times once
    woken per step (`bench/decode_under_app.py`).
    So the worker hands out a step's events inside `together()`, and the loop wakes
    once a step to take them all. The worker keeps the block open until llama.cpp
    starts the next step (ApiStreams.release), so the loop writes while the step
    computes, without the GIL llama_decode has let go; the wake-up itself keeps the
    GIL (LoopDoorbell), or the loop takes it before the worker reaches llama_decode.
    An event put outside a block (an error while the server stops) wakes the loop at
    once."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        """Made on the loop's thread, as its doorbell must be."""
        self.doorbell = LoopDoorbell(loop, self._flush)
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Queue[ApiEvent], ApiEvent]] = []
        self._held = 0  # how many `together()` blocks are open
        self._flush_due = False  # a flush is on its way to the loop

    def put(self, queue: asyncio.Queue[ApiEvent], event: ApiEvent) -> None:
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


async def write_whole(
    request: web.Request, queue: asyncio.Queue[ApiEvent], reply: ReplyBuilder
) -> web.Response:
    """The reply as one JSON body, once every choice's stream has finished; a failure of
    any is raised."""
    finished: list[ApiFinished] = []
    while len(finished) < reply.n:
        event = await queue.get()
        if isinstance(event, ApiDelta):
            reply.take(event)
        elif isinstance(event, ApiFailed):
            raise event.error
        elif isinstance(event, ApiFinished):
            finished.append(event)
    request[USAGE_WORDS] = usage_words(finished)
    return web.json_response(reply.whole(finished))


async def write_stream(
    request: web.Request, queue: asyncio.Queue[ApiEvent], reply: ReplyBuilder
) -> web.StreamResponse:
    """The reply as server-sent events. Events that wait in the queue together (the loop
    fell behind the engine) go out in one write: one system call, not one per chunk."""
    first = await queue.get()  # an error before the first token is still a plain error
    if isinstance(first, ApiFailed):
        raise first.error
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    chunks: list[bytes] = [_event(chunk) for chunk in reply.first_chunks()]
    finished: list[ApiFinished] = []
    event: ApiEvent = first
    while True:
        if isinstance(event, ApiDelta):
            chunks.append(_event(reply.delta_chunk(event)))
        elif isinstance(event, ApiFailed):
            await response.write(b"".join([*chunks, _event(event.error.body())]))
            return response
        elif isinstance(event, ApiFinished):
            finished.append(event)
            chunks += _closing(reply, event)
            if len(finished) == reply.n:
                request[USAGE_WORDS] = usage_words(finished)
                await response.write(b"".join([*chunks, *_usage(reply, finished)]))
                await response.write_eof()
                return response
        if queue.empty():
            await response.write(b"".join(chunks))
            chunks = []
            event = await queue.get()
        else:
            event = queue.get_nowait()


def _closing(reply: ReplyBuilder, finished: ApiFinished) -> list[bytes]:
    """The last chunks of a finished choice: its tool calls and its finish reason."""
    chunks = []
    if finished.tool_calls:
        chunks.append(_event(reply.tool_calls_chunk(finished)))
    chunks.append(_event(reply.final_chunk(finished)))
    return chunks


def _usage(reply: ReplyBuilder, finished: list[ApiFinished]) -> list[bytes]:
    """After the last choice: the usage when asked for, and [DONE]."""
    chunks = [_event(reply.usage_chunk(finished))] if reply.include_usage else []
    return [*chunks, b"data: [DONE]\n\n"]


def _event(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


def usage_words(finished: list[ApiFinished]) -> str:
    """What the request log says of a reply's tokens."""
    usage = total_usage(finished)
    return (
        f"prompt {usage.prompt_tokens} ({usage.cached_tokens} cached) "
        f"completion {usage.completion_tokens} tokens,"
    )
