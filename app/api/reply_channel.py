"""A request's events from the engine worker to its route, or its text straight to its socket.

Handed to the server's loop, every token of a stream woke the loop's thread in
the middle of llama.cpp's next step: it took a core from one of ggml's two
threads while it ran asyncio's hand-off and aiohttp's write, and the other
thread waited for it at the step's next barrier. The step cost 3 to 6% more
than llama-server's, whose HTTP thread holds no GIL and writes between steps.
Written by the worker, the step costs what llama-server's does and the loop
sleeps; tokens/s came out the same, as the client the worker wakes now runs
between steps on the worker's core (docs/measurements.md, "The worker writes
the stream").

So a stream's route hands its socket to the channel (`hand_over`) and the
worker writes each new piece of text itself, between steps: one chunk of
server-sent events, framed as aiohttp frames it, sent on a duplicate of the
connection's socket that never blocks. The loop is not woken at all. The route
hands the socket over before the first token, with the stream's opening (the
HTTP head and the role chunk), which the worker sends with the first text: woken
for it, the loop (SCHED_BATCH) waited for a core while both computed the next
step, and the first token reached the client that much later. Whatever is not
plain text (the finish, a failure), a send the socket could not take whole, and
a client that has gone hand the stream back to the route, which writes the
rest as before; it hands the socket over again once it has caught up. A failure
before the first text finds the opening unsent, so the client still gets a plain
HTTP error. Where the loop owns no plain socket (Windows' proactor loop), the
route never hands it over.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.api.engine_calls import ApiDelta, ApiEvent
from app.api.openai_replies import ReplyBuilder

if TYPE_CHECKING:
    from app.api.outbox import Outbox

log = logging.getLogger(__name__)

# a selector loop's sockets are plain non-blocking sockets; a proactor's are not
WORKER_WRITES = sys.platform != "win32"
_NO_SIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)  # a gone client is an error, not SIGPIPE


@dataclass(frozen=True)
class Unsent:
    """The tail of a chunk the socket could not take: the route writes it as it is."""

    data: bytes


@dataclass(frozen=True)
class ClientGone:
    """The client closed the connection while the worker wrote to it."""


ChannelEvent = ApiEvent | Unsent | ClientGone


def sse_event(body: dict[str, Any]) -> bytes:
    """One server-sent event of a chat or completion stream."""
    return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


def http_chunk(body: bytes) -> bytes:
    """One chunk of a response in chunked transfer encoding, framed as aiohttp frames it."""
    return b"%x\r\n%s\r\n" % (len(body), body)


class SocketWrites:
    """A stream's text chunks sent by the worker on its own duplicate of the socket.

    A duplicate, so the connection stays open under it until `close` even if the
    loop closes its own socket meanwhile: a send never reaches whichever connection
    reused the number."""

    def __init__(
        self, connection: Any, reply: ReplyBuilder, chunked: bool, opening: bytes = b""
    ) -> None:
        self._socket = socket.fromfd(connection.fileno(), connection.family, connection.type)
        self._socket.setblocking(False)  # as the loop's: shared by both descriptors
        self._reply = reply
        self._chunked = chunked
        self._opening = opening  # what goes out before the first chunk (the stream's head)

    @property
    def opening(self) -> bool:
        """Whether the next write sends the stream's opening first."""
        return bool(self._opening)

    def write(self, delta: ApiDelta) -> bytes:
        """Send the delta's chunk, after the opening if it is still to go; what the socket did
        not take. OSError: the client has gone."""
        body = sse_event(self._reply.delta_chunk(delta))
        data = self._opening + (http_chunk(body) if self._chunked else body)
        self._opening = b""
        try:
            sent = self._socket.send(data, _NO_SIGNAL)
        except (BlockingIOError, InterruptedError):
            sent = 0
        return data[sent:]

    def close(self) -> None:
        self._socket.close()


class ReplyChannel:
    """Where the worker sends a request's events: the route's queue, through the Outbox;
    while the route has handed over its socket, text straight to the client.

    The worker calls `send`; the route, on the loop, calls the rest."""

    def __init__(self, outbox: Outbox) -> None:
        """Made on the loop's thread (its queue belongs to the loop)."""
        self._outbox = outbox
        self._queue: asyncio.Queue[ChannelEvent] = asyncio.Queue()
        self._lock = threading.Lock()  # the worker's send against a hand-over or take-back
        self._writes: SocketWrites | None = None
        self._on_the_way = 0  # events sent through the outbox that the route has not taken
        self._opened = False  # the worker sent the stream's opening (or handed back its tail)

    # --- the worker's thread ---

    def send(self, event: ApiEvent) -> None:
        """Write the event's text to the client, or else queue it for the route."""
        queued: ChannelEvent = event
        with self._lock:
            writes = self._writes
            if writes is not None:
                if isinstance(event, ApiDelta):
                    self._opened = self._opened or writes.opening
                    try:
                        unsent = writes.write(event)
                    except OSError as exc:
                        log.debug("the client has gone: %s", exc)
                        queued = ClientGone()
                    else:
                        if not unsent:
                            return
                        log.debug("the socket took %d bytes short of a chunk", len(unsent))
                        queued = Unsent(unsent)
                self._writes = None  # the route writes from here on
                writes.close()
            self._on_the_way += 1
        self._outbox.put(self._queue, queued)

    # --- the loop's thread ---

    async def get(self) -> ChannelEvent:
        event = await self._queue.get()
        self._taken()
        return event

    def get_nowait(self) -> ChannelEvent:
        event = self._queue.get_nowait()
        self._taken()
        return event

    def empty(self) -> bool:
        return self._queue.empty()

    def _taken(self) -> None:
        with self._lock:
            self._on_the_way -= 1

    def hand_over(
        self,
        transport: asyncio.BaseTransport | None,
        reply: ReplyBuilder,
        chunked: bool,
        opening: bytes = b"",
    ) -> bool:
        """Let the worker write the stream's text from now on: only when everything so far
        has reached the client's socket and every event sent has been taken, so nothing
        the worker writes can overtake what the route has yet to write. `opening`, the
        stream's head before anything was written, goes out with the first text."""
        if not WORKER_WRITES or not isinstance(transport, asyncio.WriteTransport):
            return False
        connection = transport.get_extra_info("socket")
        if connection is None or transport.is_closing() or transport.get_write_buffer_size():
            return False
        with self._lock:
            if self._writes is not None or self._on_the_way:  # the queue's events count too
                return False
            try:
                self._writes = SocketWrites(connection, reply, chunked, opening)
            except OSError as exc:  # no descriptor left for the duplicate: the loop writes
                log.debug("the worker cannot write this stream: %s", exc)
                return False
        return True

    def take_back(self) -> None:
        """The worker writes nothing more (the route is leaving)."""
        with self._lock:
            writes, self._writes = self._writes, None
        if writes is not None:
            writes.close()

    @property
    def handed_over(self) -> bool:
        return self._writes is not None

    @property
    def opened(self) -> bool:
        """Whether the worker sent the opening the route handed over (or handed its unsent
        tail back in an `Unsent`): the route must not send a head of its own."""
        with self._lock:
            return self._opened
