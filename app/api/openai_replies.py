"""The engine's events as OpenAI's JSON: whole responses, and the chunks of a stream.

A stream is what OpenAI sends: a first chunk with the assistant's role, then
content (and reasoning) deltas, tool calls as deltas of their own, a last
chunk with an empty delta and the finish reason and, when the client asked
with `stream_options.include_usage`, one more with no choices and the usage.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from app.api.engine_calls import ApiDelta, ApiFinished
from app.api.tool_calls import ToolCall
from engine.generation.logprobs import TokenLogprob


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def chat_logprobs(entries: tuple[TokenLogprob, ...] | list[TokenLogprob]) -> dict[str, Any]:
    return {
        "content": [
            {
                "token": _text(e.text),
                "logprob": e.logprob,
                "bytes": list(e.text),
                "top_logprobs": [
                    {"token": _text(text), "logprob": lp, "bytes": list(text)}
                    for _t, text, lp in e.top
                ],
            }
            for e in entries
        ]
    }


def completion_logprobs(entries: list[TokenLogprob], offset: int) -> dict[str, Any]:
    tokens = [_text(e.text) for e in entries]
    offsets: list[int] = []
    for token in tokens:
        offsets.append(offset)
        offset += len(token)
    return {
        "tokens": tokens,
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{_text(text): lp for _t, text, lp in e.top} for e in entries],
        "text_offset": offsets,
    }


def tool_call_dict(call: ToolCall, index: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    return data if index is None else {"index": index, **data}


@dataclass
class ReplyBuilder:
    """One reply's identity and what it has said so far; makes its chunks and its whole body."""

    endpoint: str  # "chat" or "completion"
    model: str
    include_usage: bool = False
    logprobs: bool = False
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    token_logprobs: list[TokenLogprob] = field(default_factory=list)

    @property
    def _chat(self) -> bool:
        return self.endpoint == "chat"

    def _envelope(self, choices: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
        if self._chat:
            kind, prefix = ("chat.completion.chunk" if stream else "chat.completion"), "chatcmpl-"
        else:
            kind, prefix = "text_completion", "cmpl-"
        body: dict[str, Any] = {
            "id": prefix + self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "shardchat",
            "choices": choices,
        }
        if stream and self.include_usage:
            body["usage"] = None
        return body

    # --- streaming ---

    def first_chunk(self) -> dict[str, Any] | None:
        if not self._chat:
            return None
        choice = {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        return self._envelope([choice], True)

    def delta_chunk(self, delta: ApiDelta) -> dict[str, Any]:
        offset = sum(len(c) for c in self.content)
        self.take(delta)
        if self._chat:
            change: dict[str, Any] = {}
            if delta.reasoning:
                change["reasoning_content"] = delta.reasoning
            if delta.content:
                change["content"] = delta.content
            logprobs = chat_logprobs(delta.logprobs) if self.logprobs else None
            choice = {"index": 0, "delta": change, "logprobs": logprobs, "finish_reason": None}
        else:
            logprobs = completion_logprobs(list(delta.logprobs), offset) if self.logprobs else None
            choice = {
                "index": 0,
                "text": delta.content,
                "logprobs": logprobs,
                "finish_reason": None,
            }
        return self._envelope([choice], True)

    def tool_calls_chunk(self, calls: tuple[ToolCall, ...]) -> dict[str, Any]:
        change = {"tool_calls": [tool_call_dict(call, i) for i, call in enumerate(calls)]}
        choice = {"index": 0, "delta": change, "logprobs": None, "finish_reason": None}
        return self._envelope([choice], True)

    def final_chunk(self, finished: ApiFinished) -> dict[str, Any]:
        if self._chat:
            choice: dict[str, Any] = {"index": 0, "delta": {}, "logprobs": None}
        else:
            choice = {"index": 0, "text": "", "logprobs": None}
        choice["finish_reason"] = finished.finish_reason
        return self._envelope([choice], True)

    def usage_chunk(self, finished: ApiFinished) -> dict[str, Any]:
        body = self._envelope([], True)
        body["usage"] = finished.usage.to_dict()
        return body

    # --- whole ---

    def take(self, delta: ApiDelta) -> None:
        self.content.append(delta.content)
        self.reasoning.append(delta.reasoning)
        self.token_logprobs.extend(delta.logprobs)

    def whole(self, finished: ApiFinished) -> dict[str, Any]:
        text = "".join(self.content)
        if self._chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if finished.tool_calls:
                message["content"] = text or None
                message["tool_calls"] = [tool_call_dict(call) for call in finished.tool_calls]
            reasoning = "".join(self.reasoning)
            if reasoning:
                message["reasoning_content"] = reasoning
            logprobs = chat_logprobs(self.token_logprobs) if self.logprobs else None
            choice = {"index": 0, "message": message, "logprobs": logprobs}
        else:
            logprobs = completion_logprobs(self.token_logprobs, 0) if self.logprobs else None
            choice = {"index": 0, "text": text, "logprobs": logprobs}
        choice["finish_reason"] = finished.finish_reason
        body = self._envelope([choice], False)
        body["usage"] = finished.usage.to_dict()
        return body
