"""The engine's events as OpenAI's JSON: whole responses, and the chunks of a stream.

A stream is what OpenAI sends: a first chunk with the assistant's role, then
content (and reasoning) deltas, tool calls as deltas of their own, a last
chunk with an empty delta and the finish reason and, when the client asked
with `stream_options.include_usage`, one more with no choices and the usage.
A request for n choices gets each of these per choice, told apart by `index`.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from app.api.engine_calls import ApiDelta, ApiFinished, Usage
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
class _ChoiceSoFar:
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    token_logprobs: list[TokenLogprob] = field(default_factory=list)
    length: int = 0  # characters of content so far: summed per delta, it cost O(n^2) a reply


@dataclass
class ReplyBuilder:
    """One reply's identity and what each of its choices has said so far; makes its chunks
    and its whole body."""

    endpoint: str  # "chat" or "completion"
    model: str
    include_usage: bool = False
    logprobs: bool = False
    n: int = 1
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))
    choices: dict[int, _ChoiceSoFar] = field(default_factory=dict)

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

    def _choice(self, index: int) -> _ChoiceSoFar:
        return self.choices.setdefault(index, _ChoiceSoFar())

    # --- streaming ---

    def first_chunks(self) -> list[dict[str, Any]]:
        """A chat stream opens with the assistant's role, one chunk per choice."""
        if not self._chat:
            return []
        return [
            self._envelope(
                [
                    {
                        "index": index,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
                True,
            )
            for index in range(self.n)
        ]

    def delta_chunk(self, delta: ApiDelta) -> dict[str, Any]:
        offset = self._choice(delta.index).length
        self.take(delta)
        if self._chat:
            change: dict[str, Any] = {}
            if delta.reasoning:
                change["reasoning_content"] = delta.reasoning
            if delta.content:
                change["content"] = delta.content
            logprobs = chat_logprobs(delta.logprobs) if self.logprobs else None
            choice = {
                "index": delta.index,
                "delta": change,
                "logprobs": logprobs,
                "finish_reason": None,
            }
        else:
            logprobs = completion_logprobs(list(delta.logprobs), offset) if self.logprobs else None
            choice = {
                "index": delta.index,
                "text": delta.content,
                "logprobs": logprobs,
                "finish_reason": None,
            }
        return self._envelope([choice], True)

    def tool_calls_chunk(self, finished: ApiFinished) -> dict[str, Any]:
        calls = finished.tool_calls
        change = {"tool_calls": [tool_call_dict(call, i) for i, call in enumerate(calls)]}
        choice = {
            "index": finished.index,
            "delta": change,
            "logprobs": None,
            "finish_reason": None,
        }
        return self._envelope([choice], True)

    def final_chunk(self, finished: ApiFinished) -> dict[str, Any]:
        if self._chat:
            choice: dict[str, Any] = {"index": finished.index, "delta": {}, "logprobs": None}
        else:
            choice = {"index": finished.index, "text": "", "logprobs": None}
        choice["finish_reason"] = finished.finish_reason
        return self._envelope([choice], True)

    def usage_chunk(self, finished: list[ApiFinished]) -> dict[str, Any]:
        body = self._envelope([], True)
        body["usage"] = total_usage(finished).to_dict()
        return body

    # --- whole ---

    def take(self, delta: ApiDelta) -> None:
        choice = self._choice(delta.index)
        choice.content.append(delta.content)
        choice.length += len(delta.content)
        choice.reasoning.append(delta.reasoning)
        choice.token_logprobs.extend(delta.logprobs)

    def whole(self, finished: list[ApiFinished]) -> dict[str, Any]:
        """The reply once every choice has finished."""
        choices = [self._whole_choice(end) for end in sorted(finished, key=lambda f: f.index)]
        body = self._envelope(choices, False)
        body["usage"] = total_usage(finished).to_dict()
        return body

    def _whole_choice(self, finished: ApiFinished) -> dict[str, Any]:
        said = self._choice(finished.index)
        text = "".join(said.content)
        if self._chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if finished.tool_calls:
                message["content"] = text or None
                message["tool_calls"] = [tool_call_dict(call) for call in finished.tool_calls]
            reasoning = "".join(said.reasoning)
            if reasoning:
                message["reasoning_content"] = reasoning
            logprobs = chat_logprobs(said.token_logprobs) if self.logprobs else None
            choice = {"index": finished.index, "message": message, "logprobs": logprobs}
        else:
            logprobs = completion_logprobs(said.token_logprobs, 0) if self.logprobs else None
            choice = {"index": finished.index, "text": text, "logprobs": logprobs}
        choice["finish_reason"] = finished.finish_reason
        return choice


def total_usage(finished: list[ApiFinished]) -> Usage:
    """A request's usage, as OpenAI counts it: the prompt once (its choices share it), the
    tokens of every choice's reply."""
    first = min(finished, key=lambda f: f.index).usage
    generated = sum(f.usage.completion_tokens for f in finished)
    return Usage(first.prompt_tokens, generated, first.cached_tokens)
