"""The engine worker's half of an API request: the prompt it evaluates, the events it sends.

The server's thread parses a request into an `ApiCall` and hands the worker
an `ApiJob`; a text prompt is rendered with the model's own chat template and
tokenized on the server's executor first (`prepare`), so a long one never holds
up the engine's steps; on the worker's thread (which owns the model) an image
prompt is prepared, the prompt is checked against the context and submitted to
the API's stream pool. After every step the
job's new text is split into reasoning and answer, tool calls are held back
and parsed, and the pieces go to the job's sink as plain events, which the
server's loop turns into OpenAI's JSON.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.api.api_errors import ApiError, bad_request, context_exceeded, server_error
from app.api.openai_request import ApiCall
from app.api.tool_calls import (
    ToolCall,
    ToolCallFormat,
    ToolCallStream,
    format_for_template,
    tool_call_grammar,
)
from engine.cancel import CancelToken
from engine.errors import BadInputError
from engine.generation.logprobs import TokenLogprob
from engine.generation.prompt_pieces import Piece, TextRun, prompt_fits, prompt_size
from engine.generation.stats import FinishReason
from engine.generation.stream import StreamRequest
from engine.generation.thinking import ThinkingSplitter
from engine.model.chat_template import ChatTemplate
from engine.runtime.loaded_model import LoadedModel
from engine.serving.stream_pool import PoolEntry, StreamPool

log = logging.getLogger(__name__)
_ids = itertools.count(1)
# formats whose call marker is a control token ([TOOL_CALLS], <|python_tag|>): the reply's
# text must show control tokens for the parser to see the call
_MARKED_BY_CONTROL_TOKENS = (ToolCallFormat.MISTRAL, ToolCallFormat.LLAMA3)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


@dataclass(frozen=True)
class ApiDelta:
    """New reply text (answer and reasoning apart) and its tokens' logprobs."""

    content: str = ""
    reasoning: str = ""
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class ApiFinished:
    finish_reason: str  # OpenAI's: stop, length, tool_calls
    usage: Usage
    tool_calls: tuple[ToolCall, ...] = ()
    seconds: float = 0.0


@dataclass(frozen=True)
class ApiFailed:
    error: ApiError


ApiEvent = ApiDelta | ApiFinished | ApiFailed
Sink = Callable[[ApiEvent], None]


@dataclass
class ApiJob:
    """A parsed request on its way to the engine; `sink` is called on the worker's thread."""

    call: ApiCall
    sink: Sink
    label: str = field(default_factory=lambda: f"api request {next(_ids)}")
    cancel: CancelToken = field(default_factory=CancelToken)
    created: float = field(default_factory=time.perf_counter)
    # a library model to load first (the server allows switching models): (model, projector)
    switch_to: tuple[str, str | None] | None = None
    prepared: PreparedPrompt | None = None  # rendered and tokenised off the engine's thread


@dataclass(frozen=True)
class PreparedPrompt:
    """A prompt rendered and tokenised for one model under one prompt format: used only if
    the engine still has both when it admits the job."""

    model: LoadedModel
    template: ChatTemplate  # the model's chat template when it was rendered
    pieces: tuple[Piece, ...]
    text: str
    stop: tuple[str, ...]
    tool_format: ToolCallFormat | None
    grammar: str | None

    def fits(self, model: LoadedModel) -> bool:
        return self.model is model and self.template is model.chat_template


def prepare(call: ApiCall, model: LoadedModel) -> PreparedPrompt:
    """Render and tokenise a text prompt; safe beside the engine's steps (llama.cpp's
    tokenizer reads only the vocabulary), as long as the model stays loaded meanwhile.
    ApiError when it cannot be rendered (tools the template cannot render)."""
    template = model.chat_template
    pieces, text, stop, tool_format, grammar = _prompt(call, model)
    return PreparedPrompt(model, template, tuple(pieces), text, stop, tool_format, grammar)


class ServedJob:
    """A job admitted to the pool: its stream's output turned into events."""

    def __init__(
        self, job: ApiJob, entry: PoolEntry, prompt_text: str, tools: ToolCallFormat | None
    ) -> None:
        self.job = job
        self.entry = entry
        chat = job.call.endpoint == "chat"
        self._thinking = ThinkingSplitter.after(prompt_text) if chat else None
        self._tools = ToolCallStream(tools) if tools is not None else None

    def pump(self) -> None:
        """Send what the stream said since the last call."""
        stream = self.entry.stream
        if stream is None:
            return
        text = stream.take_text()
        logprobs = tuple(stream.take_logprobs())
        content, reasoning = self._split(text)
        if content or reasoning or logprobs:
            self.job.sink(ApiDelta(content, reasoning, logprobs))

    def finish(self) -> None:
        """Send the end: the last held-back text, the tool calls, the finish reason, usage."""
        stream = self.entry.stream
        if stream is None and self.entry.bad_input:  # e.g. a grammar llama.cpp cannot parse
            self.job.sink(ApiFailed(bad_request(self.entry.error or "refused", code="refused")))
            return
        if stream is None or stream.finish is FinishReason.ERROR:
            message = self.entry.error or (stream.error if stream else None) or "failed"
            self.job.sink(ApiFailed(_admission_error(message)))
            return
        self.pump()
        content, reasoning = "", ""
        if self._thinking is not None:
            rest = self._thinking.finish()
            content, reasoning = self._tool_content(rest.answer), rest.thinking
        calls: list[ToolCall] = []
        if self._tools is not None:
            tail, calls = self._tools.finish()
            content += tail
        if content or reasoning:
            self.job.sink(ApiDelta(content, reasoning))
        finish = _finish_reason(stream.finish or FinishReason.CANCELLED, bool(calls))
        usage = Usage(len(stream.identities), len(stream.generated), stream.reused)
        seconds = time.perf_counter() - self.job.created
        self.job.sink(ApiFinished(finish, usage, tuple(calls), seconds))

    def _split(self, text: str) -> tuple[str, str]:
        if self._thinking is None:
            return self._tool_content(text), ""
        part = self._thinking.feed(text)
        return self._tool_content(part.answer), part.thinking

    def _tool_content(self, text: str) -> str:
        if self._tools is None or not text:
            return text
        return self._tools.feed(text)


def admit(job: ApiJob, model: LoadedModel, pool: StreamPool) -> ServedJob:
    """Render and tokenize the job's prompt (unless the server's thread did) and queue it in
    the pool; ApiError when it cannot run (the model cannot see images, the template cannot
    render tools, it does not fit)."""
    call = job.call
    prepared = job.prepared
    if prepared is None or not prepared.fits(model):
        prepared = prepare(call, model)
    pieces, prompt_text, stop = prepared.pieces, prepared.text, prepared.stop
    tool_format, grammar = prepared.tool_format, prepared.grammar
    size = prompt_size(pieces)
    if size == 0:  # nothing to evaluate, so nothing to sample from: it would never end
        raise bad_request("the prompt is empty", "prompt" if call.endpoint != "chat" else None)
    room = pool.n_ctx_per_slot
    if not prompt_fits(size, room):
        raise context_exceeded(room, str(size), call.endpoint)
    request = StreamRequest(
        pieces, call.settings, stop, job.cancel, job.label,
        reuse_cache=True, grammar=grammar, top_logprobs=call.top_logprobs,
        show_special=tool_format in _MARKED_BY_CONTROL_TOKENS, window=room,
    )  # fmt: skip
    seed = call.settings.seed if call.settings.seed is not None else model.params.seed
    entry = pool.submit(request, seed, job.label)
    return ServedJob(job, entry, prompt_text, tool_format)


def _prompt(
    call: ApiCall, model: LoadedModel
) -> tuple[list[Piece], str, tuple[str, ...], ToolCallFormat | None, str | None]:
    """(pieces, prompt text, stop strings, tool-call format, grammar) of a call."""
    prompt = call.prompt
    if prompt.text is not None:
        tokens = model.tokenize_text(prompt.text, add_bos=model.wants_bos(), special=True)
        return [TextRun(tuple(tokens))], prompt.text, (), None, call.grammar
    template = model.chat_template
    tool_format, grammar = _tools(call, template)
    tools = prompt.tools if prompt.tool_choice != "none" else ()
    switch = prompt.thinking if template.has_thinking_switch else None
    try:
        rendered = template.render_dicts(prompt.messages, enable_thinking=switch, tools=tools)
    except BadInputError as exc:
        raise bad_request(str(exc), "messages") from exc
    if prompt.images:
        pieces = _vision_pieces(call, model, rendered.text, rendered.template_adds_bos)
    else:
        pieces = [TextRun(tuple(model.tokenize_prompt(rendered)))]
    return pieces, rendered.text, rendered.stop, tool_format, grammar


def _tools(call: ApiCall, template: ChatTemplate) -> tuple[ToolCallFormat | None, str | None]:
    """The tool-call format to parse replies in, and the grammar: the response format's, or
    one that forces a call when tool_choice asks for one.

    Tools are refused, not improvised, when the model's own template does not render them:
    a model never shown tools calls them unreliably, and the refusal says what would work."""
    prompt = call.prompt
    if not prompt.tools or prompt.tool_choice == "none":
        return None, call.grammar
    fmt = format_for_template(template.source if not template.is_fallback else None)
    if fmt is None:
        raise bad_request(
            f"this model's prompt format, {template.format.describe()}, does not render "
            "tools: serve a model whose own chat template does (Qwen 2.5/3, Llama 3.1+, "
            "Mistral, Hermes) with the prompt format auto or template (--prompt-format "
            "template, or the model's setting in the model list)",
            "tools",
            "tools_not_supported",
        )
    choice = prompt.tool_choice
    if choice == "auto":
        return fmt, call.grammar
    if call.grammar is not None:
        raise bad_request("response_format cannot be combined with a forced tool call", "tools")
    name = choice["function"]["name"] if isinstance(choice, dict) else None
    try:
        return fmt, tool_call_grammar(list(prompt.tools), fmt, name)
    except ValueError as exc:
        raise bad_request(str(exc), "tools", "unsupported_schema") from exc


def _vision_pieces(
    call: ApiCall, model: LoadedModel, text: str, template_adds_bos: bool
) -> list[Piece]:
    vision = model.vision
    if vision is None:
        name = model.inventory.name or "the loaded model"
        raise bad_request(
            f"{name} cannot see images: it was loaded without its vision projector (mmproj)",
            "messages",
            "model_not_multimodal",
        )
    try:
        images = [vision.decoded(image) for image in call.prompt.images]
        add_bos = not template_adds_bos and model.wants_bos()
        pieces: list[Piece] = vision.prepare_for_decode(text, images, add_bos)
    except BadInputError as exc:
        raise bad_request(str(exc), "messages", "invalid_image") from exc
    return pieces


def _finish_reason(finish: FinishReason, called_tools: bool) -> str:
    if called_tools:
        return "tool_calls"
    if finish.cut_short:
        return "length"
    return "stop"


def _admission_error(message: str) -> ApiError:
    if "cancelled" in message:
        return ApiError(499, message, "invalid_request_error", "cancelled")
    if "model was" in message:
        return ApiError(503, message, "server_error", "model_unloaded")
    return server_error(message)
