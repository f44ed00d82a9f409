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

import dataclasses
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
from engine.generation.stats import FinishReason, GenerationStats
from engine.generation.stream import Stream, StreamRequest
from engine.generation.thinking import ThinkingSplitter
from engine.model.chat_template import ChatTemplate
from engine.runtime.loaded_model import LoadedModel
from engine.serving.stream_pool import PoolEntry, StreamPool

log = logging.getLogger(__name__)
_ids = itertools.count(1)
_RANDOM_SEED = 0xFFFFFFFF  # llama.cpp's LLAMA_DEFAULT_SEED: each sampler draws its own
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
class Timings:
    """llama-server's `timings` of a reply so far (its `timings_per_token` extension)."""

    cache_n: int
    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float

    @classmethod
    def of(cls, stats: GenerationStats) -> Timings:
        prompt_n = stats.prompt_tokens - stats.reused_prompt_tokens
        rate = stats.decode_tokens_per_s
        predicted_ms = 1e3 * (stats.generated_tokens - 1) / rate if rate > 0 else 0.0
        return cls(
            stats.reused_prompt_tokens, prompt_n, 1e3 * stats.time_to_first_token_s,
            stats.generated_tokens, predicted_ms,
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {
            "cache_n": self.cache_n,
            "prompt_n": self.prompt_n,
            "prompt_ms": self.prompt_ms,
            "prompt_per_token_ms": _per(self.prompt_ms, self.prompt_n),
            "prompt_per_second": _rate(self.prompt_n, self.prompt_ms),
            "predicted_n": self.predicted_n,
            "predicted_ms": self.predicted_ms,
            "predicted_per_token_ms": _per(self.predicted_ms, self.predicted_n),
            "predicted_per_second": _rate(self.predicted_n, self.predicted_ms),
        }


@dataclass(frozen=True)
class ApiDelta:
    """New reply text (answer and reasoning apart) and its tokens' logprobs, of choice
    `index` (a request for n choices runs n streams)."""

    content: str = ""
    reasoning: str = ""
    logprobs: tuple[TokenLogprob, ...] = ()
    index: int = 0
    timings: Timings | None = None  # when the request asked (timings_per_token)


@dataclass(frozen=True)
class ApiProgress:
    """How far the prompt's evaluation is (llama-server's `return_progress`): `processed`
    of `total` prompt tokens are in the cache, `cache` of them were there already."""

    total: int
    cache: int
    processed: int
    seconds: float
    index: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "cache": self.cache,
            "processed": self.processed,
            "time_ms": 1e3 * self.seconds,
        }


@dataclass(frozen=True)
class ApiFinished:
    finish_reason: str  # OpenAI's: stop, length, tool_calls
    usage: Usage
    tool_calls: tuple[ToolCall, ...] = ()
    seconds: float = 0.0
    index: int = 0
    timings: Timings | None = None


@dataclass(frozen=True)
class ApiFailed:
    error: ApiError


ApiEvent = ApiDelta | ApiProgress | ApiFinished | ApiFailed
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
    """One choice of a job admitted to the pool: its stream's output turned into events."""

    def __init__(
        self,
        job: ApiJob,
        entry: PoolEntry,
        prompt_text: str,
        tools: ToolCallFormat | None,
        index: int = 0,
    ) -> None:
        self.job = job
        self.entry = entry
        self.index = index
        chat = job.call.endpoint == "chat"
        self._thinking = ThinkingSplitter.after(prompt_text) if chat else None
        self._tools = ToolCallStream(tools) if tools is not None else None
        self._processed = -1  # prompt tokens last reported in the cache (return_progress)

    def pump(self) -> None:
        """Send what the stream said since the last call."""
        stream = self.entry.stream
        if stream is None:
            return
        self._progress(stream)
        text = stream.take_text()
        logprobs = tuple(stream.take_logprobs())
        content, reasoning = self._split(text)
        if content or reasoning or logprobs:
            timings = Timings.of(stream.stats()) if self.job.call.timings else None
            self.job.sink(ApiDelta(content, reasoning, logprobs, self.index, timings))

    def _progress(self, stream: Stream) -> None:
        processed = min(stream.fed, len(stream.identities))
        if not self.job.call.progress or processed <= self._processed:
            return
        self._processed = processed
        seconds = stream.clock.seconds
        total = len(stream.identities)
        self.job.sink(ApiProgress(total, stream.reused, processed, seconds, self.index))

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
        timings = Timings.of(stream.stats()) if self.job.call.timings else None
        if content or reasoning:
            self.job.sink(ApiDelta(content, reasoning, index=self.index, timings=timings))
        finish = _finish_reason(stream.finish or FinishReason.CANCELLED, bool(calls))
        usage = Usage(len(stream.identities), len(stream.generated), stream.reused)
        seconds = time.perf_counter() - self.job.created
        self.job.sink(ApiFinished(finish, usage, tuple(calls), seconds, self.index, timings))

    def _split(self, text: str) -> tuple[str, str]:
        if self._thinking is None:
            return self._tool_content(text), ""
        part = self._thinking.feed(text)
        return self._tool_content(part.answer), part.thinking

    def _tool_content(self, text: str) -> str:
        if self._tools is None or not text:
            return text
        return self._tools.feed(text)


def admit(job: ApiJob, model: LoadedModel, pool: StreamPool) -> list[ServedJob]:
    """Render and tokenize the job's prompt (unless the server's thread did) and queue it in
    the pool, once per choice it asks for; ApiError when it cannot run (the model cannot see
    images, the template cannot render tools, it does not fit, more choices than slots).

    The choices of one request are sequences of the one context, decoded side by side, as
    llama-server runs them: the first evaluates the prompt, the others wait for it and
    start from a copy of its cache, each with a seed of its own."""
    call = job.call
    if call.n > pool.n_slots:
        raise too_many_choices(call.n, pool.n_slots)
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
    first = pool.submit(request, seed, job.label)
    served = [ServedJob(job, first, prompt_text, tool_format)]
    for index in range(1, call.n):
        own = seed if seed == _RANDOM_SEED else (seed + index) % 2**32
        settings = call.settings.with_changes(seed=own) if call.settings.seed is not None else None
        choice = dataclasses.replace(request, settings=settings) if settings else request
        label = f"{job.label} choice {index}"
        entry = pool.submit(choice, own, label, after=first)
        served.append(ServedJob(job, entry, prompt_text, tool_format, index))
    return served


def too_many_choices(n: int, slots: int) -> ApiError:
    """More choices than sequences run at once: refused, as llama-server refuses n past its
    slots (the choices of one request decode side by side or not at all)."""
    return bad_request(
        f"n is {n}, more than the {slots} sequences this server runs at once: ask for at "
        f"most {slots} choices", "n",
    )  # fmt: skip


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


def _per(ms: float, n: int) -> float:
    return ms / n if n else 0.0


def _rate(n: int, ms: float) -> float:
    return 1e3 * n / ms if ms > 0 else 0.0
