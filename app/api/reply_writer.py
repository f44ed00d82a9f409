"""A request's events from the engine worker, written to its client: one JSON body or SSE.

The worker's thread sends events through the request's `ReplyChannel`; a
route waits on it and writes the reply `ReplyBuilder` shapes, either whole
(`write_whole`) or as server-sent events (`write_stream`). An error before
the first token is a plain HTTP error (the route raises it); after it, the
stream is already 200 and the error goes out as its last chunk. While a
stream's text flows, the route hands its socket to the worker, which writes
the text itself (app.api.reply_channel), from the stream's head and first
token on; the route writes the rest.
"""

from __future__ import annotations

from email.utils import formatdate

from aiohttp import HttpVersion11, web
from aiohttp.http import SERVER_SOFTWARE

from app.api.engine_calls import ApiDelta, ApiFailed, ApiFinished
from app.api.middlewares import USAGE_WORDS
from app.api.openai_replies import ReplyBuilder, total_usage
from app.api.reply_channel import (
    ChannelEvent,
    ClientGone,
    ReplyChannel,
    Unsent,
    http_chunk,
    sse_event,
)

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


async def write_whole(
    request: web.Request, channel: ReplyChannel, reply: ReplyBuilder
) -> web.Response:
    """The reply as one JSON body, once every choice's stream has finished; a failure of
    any is raised."""
    finished: list[ApiFinished] = []
    while len(finished) < reply.n:
        event = await channel.get()
        if isinstance(event, ApiDelta):
            reply.take(event)
        elif isinstance(event, ApiFailed):
            raise event.error
        elif isinstance(event, ApiFinished):
            finished.append(event)
    request[USAGE_WORDS] = usage_words(finished)
    return web.json_response(reply.whole(finished))


async def write_stream(
    request: web.Request, channel: ReplyChannel, reply: ReplyBuilder
) -> web.StreamResponse:
    """The reply as server-sent events. The worker sends the head with the first token
    where it can; else the route sends both once the first event reaches it. Events that
    wait in the channel together (the loop fell behind the engine) go out in one write:
    one system call, not one per chunk."""
    opening = _worker_opening(request, reply)
    if opening is not None:
        channel.hand_over(request.transport, reply, chunked=True, opening=opening)
    try:
        first = await channel.get()
        if channel.opened:
            response: web.StreamResponse = _HeadSentByWorker(headers=SSE_HEADERS)
            await response.prepare(request)
            return await _stream(request, response, channel, reply, first, [])
        if isinstance(first, ApiFailed):  # an error before the first token: a plain error
            raise first.error
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        opening_chunks = [sse_event(chunk) for chunk in reply.first_chunks()]
        return await _stream(request, response, channel, reply, first, opening_chunks)
    finally:
        channel.take_back()


def _worker_opening(request: web.Request, reply: ReplyBuilder) -> bytes | None:
    """The stream's head and opening chunks as aiohttp would send them, for the worker to
    send with the first token; None where aiohttp would frame the stream otherwise than
    in chunks on a connection kept alive (HTTP/1.0, `Connection: close`)."""
    if request.version != HttpVersion11 or not request.keep_alive:
        return None
    headers = {
        **SSE_HEADERS,
        "Transfer-Encoding": "chunked",
        "Date": formatdate(usegmt=True),
        "Server": SERVER_SOFTWARE,
    }
    head = "HTTP/1.1 200 OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    chunks = (http_chunk(sse_event(chunk)) for chunk in reply.first_chunks())
    return (head + "\r\n").encode() + b"".join(chunks)


class _HeadSentByWorker(web.StreamResponse):
    """The response of a stream whose head the worker sent: preparing it readies aiohttp's
    writer to frame the rest in chunks, as the head said, and sends nothing. It overrides
    aiohttp's own (private) step; were that renamed, the head would go out twice, which
    the tests over real connections (tests/app/test_reply_channel.py) would catch."""

    async def _write_headers(self) -> None:  # aiohttp's step that sends the status and headers
        return None


async def _stream(
    request: web.Request,
    response: web.StreamResponse,
    channel: ReplyChannel,
    reply: ReplyBuilder,
    event: ChannelEvent,
    chunks: list[bytes],
) -> web.StreamResponse:
    """The stream from its first event the route sees (after `chunks`, what is still to go
    before it) to its end, a failure or a client gone."""
    finished: list[ApiFinished] = []
    chunked = response.headers.get("Transfer-Encoding", "").lower() == "chunked"
    while True:
        if isinstance(event, ApiDelta):
            chunks.append(sse_event(reply.delta_chunk(event)))
        elif isinstance(event, Unsent):  # the worker's chunk the socket took only in part
            await response.write(b"".join(chunks))
            chunks = []
            transport = request.transport
            if transport is None or transport.is_closing():
                return response  # the client has gone
            transport.write(event.data)  # framed already: not through the response
        elif isinstance(event, ClientGone):
            return response
        elif isinstance(event, ApiFailed):
            await response.write(b"".join([*chunks, sse_event(event.error.body())]))
            return response
        elif isinstance(event, ApiFinished):
            finished.append(event)
            chunks += _closing(reply, event)
            if len(finished) == reply.n:
                request[USAGE_WORDS] = usage_words(finished)
                await response.write(b"".join([*chunks, *_usage(reply, finished)]))
                await response.write_eof()
                return response
        if channel.empty():
            await response.write(b"".join(chunks))
            chunks = []
            if not response.compression:  # the worker's chunks go out as they are
                channel.hand_over(request.transport, reply, chunked)
            event = await channel.get()
        else:
            event = channel.get_nowait()


def _closing(reply: ReplyBuilder, finished: ApiFinished) -> list[bytes]:
    """The last chunks of a finished choice: its tool calls and its finish reason."""
    chunks = []
    if finished.tool_calls:
        chunks.append(sse_event(reply.tool_calls_chunk(finished)))
    chunks.append(sse_event(reply.final_chunk(finished)))
    return chunks


def _usage(reply: ReplyBuilder, finished: list[ApiFinished]) -> list[bytes]:
    """After the last choice: the usage when asked for, and [DONE]."""
    chunks = [sse_event(reply.usage_chunk(finished))] if reply.include_usage else []
    return [*chunks, b"data: [DONE]\n\n"]


def usage_words(finished: list[ApiFinished]) -> str:
    """What the request log says of a reply's tokens."""
    usage = total_usage(finished)
    return (
        f"prompt {usage.prompt_tokens} ({usage.cached_tokens} cached) "
        f"completion {usage.completion_tokens} tokens,"
    )
