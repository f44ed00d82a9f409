"""A stream's text written to its socket by the engine worker (app.api.reply_channel).

Real sockets throughout: a socket pair whose far end is the client, a real asyncio
loop on its own thread owning the near end as the server's loop owns a connection,
and then the real server streaming the default model's replies to real clients.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import queue
import socket
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest
from aiohttp import web
from api_server_fixtures import Serving, start_serving
from loop_threads import running

from app.api.api_errors import ApiError
from app.api.engine_calls import ApiDelta, ApiFailed, ApiFinished, Usage
from app.api.openai_replies import ReplyBuilder
from app.api.outbox import Outbox
from app.api.reply_channel import (
    WORKER_WRITES,
    ChannelEvent,
    ClientGone,
    ReplyChannel,
    SocketWrites,
    Unsent,
)
from app.api.reply_writer import write_stream

pytestmark = pytest.mark.skipif(not WORKER_WRITES, reason="the worker writes on selector loops")

T = TypeVar("T")

QUESTION = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]


def chunk_payloads(data: bytes) -> list[bytes]:
    """The payloads of HTTP chunks, up to the last chunk or the data's end, which must be a
    chunk's end."""
    payloads = []
    while data:
        size, rest = data.split(b"\r\n", 1)
        length = int(size, 16)
        assert rest[length : length + 2] == b"\r\n", "a chunk's frame is broken"
        if length == 0:
            break
        payloads.append(rest[:length])
        data = rest[length + 2 :]
    return payloads


def chunk_bodies(data: bytes) -> list[dict[str, Any]]:
    """The JSON body of each chunk, each chunk one server-sent event."""
    bodies = []
    for event in chunk_payloads(data):
        assert event.startswith(b"data: ") and event.endswith(b"\n\n")
        assert event.count(b"\n\n") == 1
        bodies.append(json.loads(event[6:]))
    return bodies


def contents(bodies: list[dict[str, Any]]) -> list[str]:
    return [b["choices"][0]["delta"]["content"] for b in bodies]


def received(far: socket.socket) -> bytes:
    far.setblocking(False)
    data = b""
    while True:
        try:
            more = far.recv(1 << 16)
        except BlockingIOError:
            return data
        if not more:
            return data
        data += more


def test_each_delta_goes_out_as_one_http_chunk_of_one_event() -> None:
    near, far = socket.socketpair()
    with near, far:
        writes = SocketWrites(near, ReplyBuilder("chat", "m"), chunked=True)
        assert writes.write(ApiDelta(content="Hello")) == b""
        assert writes.write(ApiDelta(content=" wörld")) == b""
        writes.close()
        assert near.fileno() >= 0  # the connection's own socket stays open
        assert contents(chunk_bodies(received(far))) == ["Hello", " wörld"]


def test_what_a_full_socket_does_not_take_is_handed_back_whole() -> None:
    near, far = socket.socketpair()
    with near, far:
        near.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        near.setblocking(False)
        writes = SocketWrites(near, ReplyBuilder("chat", "m"), chunked=True)
        said = []
        for n in range(10_000):
            said.append(f"token {n} " * 8)
            unsent = writes.write(ApiDelta(content=said[-1]))
            if unsent:
                break
        writes.close()
        assert unsent, "the socket never filled"
        assert contents(chunk_bodies(received(far) + unsent)) == said


def test_the_opening_goes_out_with_the_first_text_and_only_then() -> None:
    near, far = socket.socketpair()
    with near, far:
        writes = SocketWrites(near, ReplyBuilder("chat", "m"), chunked=True, opening=b"HEAD\r\n")
        assert writes.opening
        assert received(far) == b""
        assert writes.write(ApiDelta(content="Hello")) == b""
        assert not writes.opening
        assert writes.write(ApiDelta(content=" again")) == b""
        writes.close()
        data = received(far)
        assert data.startswith(b"HEAD\r\n")
        assert contents(chunk_bodies(data.removeprefix(b"HEAD\r\n"))) == ["Hello", " again"]


def test_a_closed_client_is_an_error() -> None:
    near, far = socket.socketpair()
    with near:
        far.close()
        writes = SocketWrites(near, ReplyBuilder("chat", "m"), chunked=True)
        with pytest.raises(OSError):
            writes.write(ApiDelta(content="Hello"))
        writes.close()


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    with running(asyncio.new_event_loop()) as started:
        yield started


class Connection:
    """A channel whose route's connection is the near end of a socket pair, the far end
    the client; the test's thread is the worker."""

    def __init__(self, loop: asyncio.AbstractEventLoop, send_buffer: int = 0) -> None:
        self.loop = loop
        self.near, self.far = socket.socketpair()
        if send_buffer:
            self.near.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)

        async def made() -> tuple[Outbox, ReplyChannel, asyncio.BaseTransport]:
            outbox = Outbox(loop)
            transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, self.near)
            return outbox, ReplyChannel(outbox), transport

        self.outbox, self.channel, self.transport = self.on_loop(made())
        self.reply = ReplyBuilder("chat", "m")

    def on_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def hand_over(self, opening: bytes = b"") -> bool:
        async def hand() -> bool:
            return self.channel.hand_over(self.transport, self.reply, True, opening)

        return self.on_loop(hand())

    def taken(self, n: int) -> list[ChannelEvent]:
        """The next n events the route gets, as it waits for them."""

        async def take() -> list[ChannelEvent]:
            return [await asyncio.wait_for(self.channel.get(), 10) for _ in range(n)]

        return self.on_loop(take())

    def close(self) -> None:
        async def closed() -> None:
            self.channel.take_back()
            self.transport.close()
            self.outbox.close()

        self.on_loop(closed())
        self.far.close()


@pytest.fixture
def connection(loop: asyncio.AbstractEventLoop) -> Iterator[Connection]:
    made = Connection(loop)
    yield made
    made.close()


def test_a_handed_over_streams_text_goes_to_the_socket_and_its_end_to_the_route(
    connection: Connection,
) -> None:
    assert connection.hand_over()
    for word in ["Once", " upon", " a time"]:
        connection.channel.send(ApiDelta(content=word))
    finished = ApiFinished("stop", Usage(5, 3, 0))
    connection.channel.send(finished)
    assert connection.taken(1) == [finished]
    assert not connection.channel.handed_over
    assert contents(chunk_bodies(received(connection.far))) == ["Once", " upon", " a time"]
    assert connection.outbox.doorbell.rings == 1  # the finish alone woke the loop


def test_the_worker_opens_the_stream_with_its_first_text(connection: Connection) -> None:
    assert connection.hand_over(opening=b"HEAD\r\n")
    assert not connection.channel.opened
    connection.channel.send(ApiDelta(content="Once"))
    assert connection.channel.opened
    data = received(connection.far)
    assert data.startswith(b"HEAD\r\n")
    assert contents(chunk_bodies(data.removeprefix(b"HEAD\r\n"))) == ["Once"]
    assert connection.outbox.doorbell.rings == 0  # the first token did not wake the loop


def test_a_failure_before_the_first_text_leaves_the_opening_to_the_route(
    connection: Connection,
) -> None:
    assert connection.hand_over(opening=b"HEAD\r\n")
    failed = ApiFailed(ApiError(400, "refused", "invalid_request_error"))
    connection.channel.send(failed)
    assert connection.taken(1) == [failed]
    assert not connection.channel.opened
    assert not connection.channel.handed_over
    assert received(connection.far) == b""


def test_an_opening_the_socket_cannot_take_goes_to_the_route_in_the_tail(
    loop: asyncio.AbstractEventLoop,
) -> None:
    connection = Connection(loop, send_buffer=4096)
    try:
        connection.far.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        opening = b"H" * (1 << 20)  # far more than the socket holds
        assert connection.hand_over(opening=opening)
        connection.channel.send(ApiDelta(content="Once"))
        (tail,) = connection.taken(1)
        assert isinstance(tail, Unsent)
        assert connection.channel.opened  # the route must not send a head of its own
        data = received(connection.far) + tail.data
        assert data.startswith(opening)
        assert contents(chunk_bodies(data.removeprefix(opening))) == ["Once"]
    finally:
        connection.close()


def test_the_route_keeps_the_socket_while_an_event_is_on_its_way(connection: Connection) -> None:
    with connection.outbox.together():  # a step's events, not yet handed to the loop
        connection.channel.send(ApiDelta(content="first"))
        assert not connection.hand_over()
    assert connection.taken(1) == [ApiDelta(content="first")]
    assert connection.hand_over()


def test_without_a_descriptor_to_spare_the_route_keeps_the_socket(connection: Connection) -> None:
    """The duplicate needs a file descriptor: at the process's limit the route writes."""
    import resource  # POSIX only, as the worker's writes are

    with open(os.devnull) as spare:
        lowest_free = spare.fileno()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        handed = connection.hand_over()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert not handed
    connection.channel.send(ApiDelta(content="by the route"))
    assert connection.taken(1) == [ApiDelta(content="by the route")]
    assert connection.hand_over()  # with descriptors again


def test_a_client_gone_ends_the_routes_wait(connection: Connection) -> None:
    assert connection.hand_over()
    connection.far.close()
    connection.channel.send(ApiDelta(content="lost"))
    assert connection.taken(1) == [ClientGone()]
    assert not connection.channel.handed_over


def test_a_send_the_socket_takes_in_part_hands_its_tail_and_the_rest_to_the_route(
    loop: asyncio.AbstractEventLoop,
) -> None:
    connection = Connection(loop, send_buffer=4096)
    try:
        assert connection.hand_over()
        said: list[str] = []
        while connection.channel.handed_over and len(said) < 10_000:
            said.append(f"token {len(said)} " * 8)
            connection.channel.send(ApiDelta(content=said[-1]))
        (tail,) = connection.taken(1)
        assert isinstance(tail, Unsent)
        assert contents(chunk_bodies(received(connection.far) + tail.data)) == said
        connection.channel.send(ApiDelta(content="next"))  # the route writes it
        assert connection.taken(1) == [ApiDelta(content="next")]
        failed = ApiFailed(ApiError(500, "late", "server_error"))
        connection.channel.send(failed)
        assert connection.taken(1) == [failed]
    finally:
        connection.close()


@pytest.fixture(scope="module")
def serving(default_model_file: Path) -> Iterator[Serving]:
    started = start_serving(str(default_model_file), n_slots=2, n_ctx_per_slot=1024)
    yield started
    started.close()


def test_a_stream_under_way_is_written_without_waking_the_servers_loop(serving: Serving) -> None:
    client = serving.client()
    asked = {"model": serving.model_id, "messages": QUESTION, "temperature": 0, "max_tokens": 48}
    whole = client.chat.completions.create(**asked)  # type: ignore[call-overload]
    before = serving.server.loop_wake_ups
    stream = client.chat.completions.create(**asked, stream=True)  # type: ignore[call-overload]
    pieces = [c.choices[0].delta.content for c in stream if c.choices[0].delta.content]
    woken = serving.server.loop_wake_ups - before
    print(f"{len(pieces)} pieces of text, the loop woken {woken} times")
    assert "".join(pieces) == whole.choices[0].message.content
    assert len(pieces) >= 40
    assert woken == 1  # its end (when the route wrote the first token, that woke it too)


def test_a_failure_before_the_first_token_is_still_a_plain_http_error(serving: Serving) -> None:
    """The socket was handed to the worker before the first token, with the stream's head:
    a reply refused as it starts (a schema llama.cpp's grammar cannot hold) never sent it."""
    address = urlsplit(serving.base_url)
    refused = {
        "model": serving.model_id, "messages": QUESTION, "max_tokens": 8, "stream": True,
        "response_format": {"type": "json_schema", "json_schema": {"schema": {"enum": []}}},
    }  # fmt: skip
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=60)
    try:
        for asked in (refused, {**refused, "response_format": None}):  # then one on the same
            connection.request(  # connection, as the error left it in step
                "POST", "/v1/chat/completions", json.dumps(asked),
                {"Authorization": f"Bearer {serving.api_key}", "Content-Type": "application/json"},
            )  # fmt: skip
            response = connection.getresponse()
            body = response.read()
            if asked is refused:
                assert response.status == 400, body
                assert response.getheader("Content-Type", "").startswith("application/json")
                assert json.loads(body)["error"]["message"]
            else:
                assert response.status == 200
                assert response.getheader("Content-Type") == "text/event-stream"
                assert body.rstrip().endswith(b"data: [DONE]")
    finally:
        connection.close()


class StreamRoute:
    """`write_stream` as the server's route, on a real aiohttp server on loopback, with the
    test's thread as the engine worker; the connection's send buffer is made small, so a
    client that does not read fills it within a few chunks."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.channels: queue.Queue[ReplyChannel] = queue.Queue()

        async def route(request: web.Request) -> web.StreamResponse:
            connection = request.transport.get_extra_info("socket")  # type: ignore[union-attr]
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            channel = ReplyChannel(self.outbox)
            self.channels.put(channel)
            return await write_stream(request, channel, ReplyBuilder("chat", "m"))

        async def start() -> tuple[Outbox, web.AppRunner]:
            app = web.Application()
            app.router.add_post("/", route)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            return Outbox(loop), runner

        self.outbox, self.runner = self.on_loop(start())
        self.port = self.runner.addresses[0][1]

    def on_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def settled(self) -> None:
        """The loop has finished what it was running (a route's write and hand-over)."""

        async def nothing() -> None:
            return None

        self.on_loop(nothing())

    def close(self) -> None:
        self.on_loop(self.runner.cleanup())
        self.outbox.close()


def read_until(conn: socket.socket, data: bytes, end: bytes) -> bytes:
    while end not in data:
        more = conn.recv(1 << 16)
        assert more, "the server closed the connection"
        data += more
    return data


def test_a_client_slower_than_its_stream_gets_all_of_it(loop: asyncio.AbstractEventLoop) -> None:
    """Its socket fills: the worker hands the rest of a chunk to the route, which writes it
    and what follows as the client reads, and hands the socket back once it caught up."""
    route = StreamRoute(loop)
    try:
        with socket.create_connection(("127.0.0.1", route.port), timeout=30) as conn:
            conn.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            channel = route.channels.get(timeout=10)
            said = ["Once"]
            channel.send(ApiDelta(content=said[0]))
            data = read_until(conn, b"", b"Once")
            route.settled()
            assert channel.handed_over
            while channel.handed_over and len(said) < 10_000:  # the client reads nothing
                said.append(f" token {len(said)}" * 8)
                channel.send(ApiDelta(content=said[-1]))
            said += [" by", " the", " route"]
            for text in said[-3:]:
                channel.send(ApiDelta(content=text))
            data = read_until(conn, data, b" route")
            said.append(" handed over again")
            channel.send(ApiDelta(content=said[-1]))
            data = read_until(conn, data, b" again")
            route.settled()
            assert channel.handed_over
            channel.send(ApiFinished("stop", Usage(5, len(said), 0)))
            data = read_until(conn, data, b"\r\n0\r\n\r\n")
    finally:
        route.close()
    head, _, chunks = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    events = b"".join(chunk_payloads(chunks)).split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    bodies = [json.loads(e.removeprefix(b"data: ")) for e in events[:-2]]
    assert [b["choices"][0]["delta"].get("content") for b in bodies] == ["", *said, None]
    assert bodies[-1]["choices"][0]["finish_reason"] == "stop"


def read_to_the_end(conn: socket.socket) -> bytes:
    data = b""
    while more := conn.recv(1 << 16):
        data += more
    return data


def test_an_http_1_0_client_gets_its_head_from_the_route(loop: asyncio.AbstractEventLoop) -> None:
    """No chunks in HTTP/1.0, so not the worker's opening: aiohttp frames the stream."""
    route = StreamRoute(loop)
    try:
        with socket.create_connection(("127.0.0.1", route.port), timeout=30) as conn:
            conn.sendall(b"POST / HTTP/1.0\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            channel = route.channels.get(timeout=10)
            route.settled()
            assert not channel.handed_over
            channel.send(ApiDelta(content="Once"))
            channel.send(ApiFinished("stop", Usage(5, 1, 0)))
            data = read_to_the_end(conn)
    finally:
        route.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200")
    assert b"transfer-encoding" not in head.lower()
    events = body.split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    bodies = [json.loads(e.removeprefix(b"data: ")) for e in events[:-2]]
    assert [b["choices"][0]["delta"].get("content") for b in bodies] == ["", "Once", None]


def test_the_worker_sends_the_head_aiohttp_would_have_sent(loop: asyncio.AbstractEventLoop) -> None:
    """The same status and headers (the date aside) as a stream whose first event the route
    took, where aiohttp sends the head."""
    route = StreamRoute(loop)
    heads = []
    try:
        for opened_by_worker in (True, False):
            with socket.create_connection(("127.0.0.1", route.port), timeout=30) as conn:
                conn.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
                channel = route.channels.get(timeout=10)
                route.settled()
                assert channel.handed_over
                if not opened_by_worker:
                    channel.take_back()  # as if the descriptor could not be duplicated
                channel.send(ApiDelta(content="Once"))
                channel.send(ApiFinished("stop", Usage(5, 1, 0)))
                data = read_until(conn, b"", b"\r\n0\r\n\r\n")
            assert channel.opened == opened_by_worker
            head, _, chunks = data.partition(b"\r\n\r\n")
            events = b"".join(chunk_payloads(chunks)).split(b"\n\n")
            bodies = [json.loads(e.removeprefix(b"data: ")) for e in events[:-2]]
            assert [b["choices"][0]["delta"].get("content") for b in bodies] == ["", "Once", None]
            heads.append(sorted(line for line in head.split(b"\r\n") if b"Date: " not in line))
    finally:
        route.close()
    worker, route_sent = heads
    assert worker == route_sent
    assert b"Transfer-Encoding: chunked" in worker
