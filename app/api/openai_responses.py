"""The engine's events as the Responses API's: a Response object, or its stream of events.

A streamed response opens with `response.created` and `response.in_progress`;
each output item (the reasoning, the message, each function call) is then
added, filled by deltas and closed (`response.output_item.added`,
`response.content_part.added`, `response.output_text.delta`,
`response.output_text.done`, `response.content_part.done`,
`response.output_item.done`), and the response ends with `response.completed`
(or `response.incomplete` when max_output_tokens or the context cut it short,
`response.failed` when it failed) carrying the whole Response, as OpenAI sends
them. The same builder makes the whole Response for a request that does not
stream: one code path, so both say the same. llama-server's extensions ride
along when asked: `timings` on the deltas and the last event
(timings_per_token), `prompt_progress` on response.in_progress events
(return_progress).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from app.api.api_errors import ApiError
from app.api.engine_calls import ApiDelta, ApiFailed, ApiFinished, ApiProgress
from app.api.middlewares import USAGE_WORDS
from app.api.openai_replies import chat_logprobs
from app.api.openai_request import ApiCall
from app.api.reply_channel import ChannelEvent, ReplyChannel
from app.api.reply_writer import usage_words

Event = dict[str, Any]


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


@dataclass
class _Item:
    """An output item being said: the reasoning or the message."""

    kind: str  # "reasoning" or "message"
    index: int  # its place in `output`
    id: str
    text: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)

    def part(self) -> dict[str, Any]:
        text = "".join(self.text)
        if self.kind == "reasoning":
            return {"type": "reasoning_text", "text": text}
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": self.logprobs}

    def body(self, status: str, with_content: bool = True) -> dict[str, Any]:
        content = [self.part()] if with_content else []
        if self.kind == "reasoning":
            return {"id": self.id, "type": "reasoning", "summary": [], "content": content,
                    "status": status}  # fmt: skip
        return {"id": self.id, "type": "message", "status": status, "role": "assistant",
                "content": content}  # fmt: skip


@dataclass
class ResponseBuilder:
    """One response: its identity, its output items, the events that tell them."""

    model: str
    call: ApiCall
    body: dict[str, Any]  # the request, whose settings the Response repeats
    id: str = field(default_factory=lambda: _new_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))
    output: list[dict[str, Any]] = field(default_factory=list)
    _open: _Item | None = None
    _sequence: int = 0

    # --- events ---

    def opening(self) -> list[Event]:
        kinds = ("response.created", "response.in_progress")
        return [self._event(kind, response=self.response("in_progress")) for kind in kinds]

    def progress(self, progress: ApiProgress) -> list[Event]:
        event = self._event("response.in_progress", response=self.response("in_progress"))
        event["prompt_progress"] = progress.to_dict()
        return [event]

    def delta(self, delta: ApiDelta) -> list[Event]:
        events: list[Event] = []
        if delta.reasoning:
            events += self._say("reasoning", delta.reasoning, [])
        if delta.content or delta.logprobs:
            asked = self.call.top_logprobs is not None
            logprobs = chat_logprobs(delta.logprobs)["content"] if asked else []
            events += self._say("message", delta.content, logprobs)
        if events and delta.timings is not None:
            events[-1]["timings"] = delta.timings.to_dict()
        return events

    def finish(self, finished: ApiFinished) -> list[Event]:
        """The last events: open items closed, the function calls, the whole Response."""
        cut_short = finished.finish_reason == "length"
        events = self._close("incomplete" if cut_short else "completed")
        for call in finished.tool_calls:
            item = {
                "id": _new_id("fc"), "type": "function_call", "status": "completed",
                "call_id": call.id, "name": call.name, "arguments": call.arguments,
            }  # fmt: skip
            where = {"item_id": item["id"], "output_index": len(self.output)}
            events += [
                self._event("response.output_item.added", output_index=len(self.output),
                            item={**item, "arguments": "", "status": "in_progress"}),
                self._event("response.function_call_arguments.delta", **where,
                            delta=call.arguments),
                self._event("response.function_call_arguments.done", **where,
                            arguments=call.arguments, name=call.name),
                self._event("response.output_item.done", output_index=len(self.output), item=item),
            ]  # fmt: skip
            self.output.append(item)
        final = self._final(finished)
        kind = "response.incomplete" if cut_short else "response.completed"
        event = self._event(kind, response=final)
        if finished.timings is not None:
            event["timings"] = finished.timings.to_dict()
        return [*events, event]

    def failed(self, error: ApiError) -> list[Event]:
        self._close("incomplete")
        failure = {"code": error.code or "server_error", "message": error.message}
        return [self._event("response.failed", response=self.response("failed", error=failure))]

    # --- the Response ---

    def take(self, delta: ApiDelta) -> None:
        """A delta of a response that is not streamed: said, its events unsent."""
        self.delta(delta)

    def whole(self, finished: ApiFinished) -> dict[str, Any]:
        """The Response of a request that did not stream, as the last event would carry it."""
        return dict(self.finish(finished)[-1]["response"])

    def _final(self, finished: ApiFinished) -> dict[str, Any]:
        usage = finished.usage
        details = {"reason": "max_output_tokens"} if finished.finish_reason == "length" else None
        body = self.response("incomplete" if details else "completed", incomplete=details)
        reasoned = any(item["type"] == "reasoning" for item in self.output)
        body["usage"] = {
            "input_tokens": usage.prompt_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens},
            "output_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        }
        if not reasoned:  # the reply's tokens are not told apart; with no reasoning, none is
            body["usage"]["output_tokens_details"] = {"reasoning_tokens": 0}
        if body["status"] == "completed":
            body["completed_at"] = int(time.time())
        return body

    def response(
        self,
        status: str,
        error: dict[str, Any] | None = None,
        incomplete: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        asked = self.body
        settings = self.call.settings
        text, reasoning = _asked_object(asked, "text"), _asked_object(asked, "reasoning")
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": asked.get("instructions"),
            "max_output_tokens": asked.get("max_output_tokens"),
            "model": self.model,
            "output": list(self.output),
            "parallel_tool_calls": asked.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "reasoning": {"effort": reasoning.get("effort"), "summary": None},
            "store": False,
            "temperature": settings.temperature,
            "text": {"format": text.get("format") or {"type": "text"}},
            "tool_choice": asked.get("tool_choice") or "auto",
            "tools": asked.get("tools") or [],
            "top_p": settings.top_p,
            "truncation": "disabled",
            "usage": None,
            "user": asked.get("user"),
            "metadata": asked.get("metadata") or {},
        }

    # --- items ---

    def _say(self, kind: str, text: str, logprobs: list[dict[str, Any]]) -> list[Event]:
        events: list[Event] = []
        if self._open is not None and self._open.kind != kind:
            events += self._close("completed")
        if self._open is None:
            events += self._add(kind)
        item = self._open
        assert item is not None
        item.text.append(text)
        item.logprobs += logprobs
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        if kind == "reasoning":
            return [*events, self._event("response.reasoning_text.delta", **where, delta=text)]
        delta = self._event("response.output_text.delta", **where, delta=text, logprobs=logprobs)
        return [*events, delta]

    def _add(self, kind: str) -> list[Event]:
        item = _Item(kind, len(self.output), _new_id("rs" if kind == "reasoning" else "msg"))
        self._open = item
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        part = {**item.part(), "text": ""}
        return [
            self._event("response.output_item.added", output_index=item.index,
                        item=item.body("in_progress", with_content=False)),
            self._event("response.content_part.added", **where, part=part),
        ]  # fmt: skip

    def _close(self, status: str) -> list[Event]:
        item, self._open = self._open, None
        if item is None:
            return []
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        part, text = item.part(), "".join(item.text)
        if item.kind == "reasoning":
            done = self._event("response.reasoning_text.done", **where, text=text)
        else:
            done = self._event("response.output_text.done", **where, text=text,
                               logprobs=item.logprobs)  # fmt: skip
        self.output.append(item.body(status))
        return [
            done,
            self._event("response.content_part.done", **where, part=part),
            self._event("response.output_item.done", output_index=item.index,
                        item=item.body(status)),
        ]  # fmt: skip

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event


async def write_response(
    request: web.Request, channel: ReplyChannel, reply: ResponseBuilder
) -> web.StreamResponse:
    """The Response as one JSON body once it has finished, or as its stream of events."""
    if not reply.call.stream:
        return await _write_whole(request, channel, reply)
    return await _write_events(request, channel, reply)


async def _write_whole(
    request: web.Request, channel: ReplyChannel, reply: ResponseBuilder
) -> web.Response:
    while True:
        event = await channel.get()
        if isinstance(event, ApiDelta):
            reply.take(event)
        elif isinstance(event, ApiFailed):
            raise event.error
        elif isinstance(event, ApiFinished):
            request[USAGE_WORDS] = usage_words([event])
            return web.json_response(reply.whole(event))


async def _write_events(
    request: web.Request, channel: ReplyChannel, reply: ResponseBuilder
) -> web.StreamResponse:
    first = await channel.get()  # an error before the first event is still a plain error
    if isinstance(first, ApiFailed):
        raise first.error
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                 "X-Accel-Buffering": "no"}
    )  # fmt: skip
    await response.prepare(request)
    events = reply.opening()
    event: ChannelEvent = first
    while True:
        if isinstance(event, ApiDelta):
            events += reply.delta(event)
        elif isinstance(event, ApiProgress):
            events += reply.progress(event)
        elif isinstance(event, ApiFailed):
            await response.write(_sse([*events, *reply.failed(event.error)]))
            return response
        elif isinstance(event, ApiFinished):
            request[USAGE_WORDS] = usage_words([event])
            await response.write(_sse([*events, *reply.finish(event)]))
            await response.write_eof()
            return response
        else:  # nothing else comes: this route never hands its socket to the worker
            return response
        if channel.empty():  # events that waited together go out in one write
            await response.write(_sse(events))
            events = []
            event = await channel.get()
        else:
            event = channel.get_nowait()


def _asked_object(asked: dict[str, Any], name: str) -> dict[str, Any]:
    value = asked.get(name)
    return value if isinstance(value, dict) else {}


def _sse(events: list[Event]) -> bytes:
    return b"".join(
        f"event: {e['type']}\ndata: {json.dumps(e, ensure_ascii=False)}\n\n".encode()
        for e in events
    )
