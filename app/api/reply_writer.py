"""A request's events from the engine worker, written to its client: one JSON body or SSE.

The worker's thread sends events through the request's `ReplyChannel`; a
route waits on it and writes the reply `ReplyBuilder` shapes, either whole
(`write_whole`) or as server-sent events (`write_stream`). An error before
the first token is a plain HTTP error (the route raises it); after it, the
stream is already 200 and the error goes out as its last chunk. While a
stream's text flows, the route hands its socket to the worker, which writes
the text itself (app.api.reply_channel); the route writes the rest.
"""

from __future__ import annotations

from aiohttp import web

from app.api.engine_calls import ApiDelta, ApiFailed, ApiFinished
from app.api.middlewares import USAGE_WORDS
from app.api.openai_replies import ReplyBuilder, total_usage
from app.api.reply_channel import ChannelEvent, ClientGone, ReplyChannel, Unsent, sse_event


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
    """The reply as server-sent events. Events that wait in the channel together (the loop
    fell behind the engine) go out in one write: one system call, not one per chunk."""
    first = await channel.get()  # an error before the first token is still a plain error
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
    try:
        return await _stream(request, response, channel, reply, first)
    finally:
        channel.take_back()


async def _stream(
    request: web.Request,
    response: web.StreamResponse,
    channel: ReplyChannel,
    reply: ReplyBuilder,
    event: ChannelEvent,
) -> web.StreamResponse:
    """The stream from its first event to its end, a failure or a client gone."""
    chunks: list[bytes] = [sse_event(chunk) for chunk in reply.first_chunks()]
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
