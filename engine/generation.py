"""Token generation in layers, from raw token ids up to streamed text with statistics.

`generate_step` yields token ids from llama.cpp and stops on cancel, end of
generation, the reply limit or the context window. `stream_generate` turns
them into text pieces (UTF-8 safe, stop strings held back) and finishes with
the turn's statistics. A chat session builds on `stream_generate`.

Cancelling: between tokens we check a flag (a decode step is ~10 ms); during
the prompt, which can take seconds, llama.cpp's abort callback stops
`llama_decode` between graph nodes, so a cancel lands within 100 ms. The
callback is installed only for the prompt, because a Python callback on
every graph node of every decode step would cost decode speed.
"""

from __future__ import annotations

import codecs
import ctypes
import time
from collections.abc import Iterator, Sequence
from typing import Any

import llama_cpp

from engine.cancel import CancelToken
from engine.generation_stats import FinishReason, GenerationResponse, GenerationStats
from engine.sampling import SamplingSettings, make_generate_kwargs

_PIECE_BUFFER = 64


def generate_step(
    llm: llama_cpp.Llama,
    prompt_tokens: Sequence[int],
    settings: SamplingSettings,
    cancel: CancelToken,
    reuse_cache: bool = True,
) -> Iterator[int]:
    """Yield sampled token ids; the caller stops iterating to stop generating.

    With `reuse_cache`, llama.cpp keeps the KV entries of the prompt prefix it
    already holds and evaluates only the rest. That is fast but not bit-exact:
    a prompt evaluated in other batch splits sums in another order, so greedy
    replies can differ. A fresh conversation therefore starts from an empty
    cache, which makes its first reply reproducible.
    """
    if not reuse_cache:
        llm.reset()
    with abort_prompt_on(llm, cancel) as prompt_done:
        tokens = llm.generate(prompt_tokens, reset=True, **make_generate_kwargs(settings))
        try:
            for token in tokens:
                prompt_done()
                if cancel.cancelled:
                    return
                yield token
        except RuntimeError:
            if not cancel.cancelled:
                raise
            # llama_decode returned "aborted": llama.cpp rolled its memory back and
            # Llama.eval did not count the batch, so the next turn starts clean.
        finally:
            tokens.close()


def stream_generate(
    llm: llama_cpp.Llama,
    prompt_tokens: Sequence[int],
    settings: SamplingSettings,
    cancel: CancelToken,
    stop: Sequence[str] = (),
    reuse_cache: bool = True,
) -> Iterator[GenerationResponse]:
    """Stream text pieces of the reply, then one final response carrying the statistics."""
    reused = _cached_prefix(llm, prompt_tokens) if reuse_cache else 0
    clock = TurnClock(prompt_tokens=len(prompt_tokens), reused=reused)
    text = TextAssembler(stop)
    finish = FinishReason.CANCELLED
    vocab = llm._model.vocab
    n_ctx = context_window(llm)
    for token in generate_step(llm, prompt_tokens, settings, cancel, reuse_cache):
        clock.token()
        if llama_cpp.llama_vocab_is_eog(vocab, token):
            finish = FinishReason.STOP
            break
        piece = text.feed(token_bytes(vocab, token))
        if text.stopped:
            finish = FinishReason.STOP
        elif clock.generated >= settings.max_tokens:
            finish = FinishReason.LENGTH
        elif len(prompt_tokens) + clock.generated >= n_ctx:
            finish = FinishReason.CONTEXT
        if piece:
            yield GenerationResponse(piece, clock.generated)
        if finish is not FinishReason.CANCELLED:
            break
    tail = text.flush()
    yield GenerationResponse(tail, clock.generated, finish, clock.stats(finish))


def context_window(llm: llama_cpp.Llama) -> int:
    """Tokens the context holds: llama.cpp's size, bounded by llama-cpp-python's token array."""
    return min(llm.n_ctx(), len(llm.input_ids))


def token_bytes(vocab: llama_cpp.llama_vocab_p, token: int) -> bytes:
    """The bytes of one token's text piece (special tokens render as nothing)."""
    buffer = ctypes.create_string_buffer(_PIECE_BUFFER)
    size = llama_cpp.llama_token_to_piece(vocab, token, buffer, _PIECE_BUFFER, 0, False)
    if size < 0:  # the piece is longer than the buffer: llama.cpp tells us how long
        buffer = ctypes.create_string_buffer(-size)
        size = llama_cpp.llama_token_to_piece(vocab, token, buffer, -size, 0, False)
    return buffer.raw[:size]


def _cached_prefix(llm: llama_cpp.Llama, prompt_tokens: Sequence[int]) -> int:
    """How many leading prompt tokens llama.cpp still holds in its KV cache from the last turn."""
    cached = 0
    for held, wanted in zip(llm.input_ids[: llm.n_tokens], prompt_tokens, strict=False):
        if held != wanted:
            break
        cached += 1
    return min(cached, max(len(prompt_tokens) - 1, 0))


class abort_prompt_on:  # noqa: N801 - used as a context manager, reads as a phrase
    """Install llama.cpp's abort callback for the prompt; `prompt_done()` removes it."""

    def __init__(self, llm: llama_cpp.Llama, cancel: CancelToken) -> None:
        self._ctx = llm._ctx.ctx
        self._installed = False
        self._callback = llama_cpp.ggml_abort_callback(lambda _data: cancel.cancelled)

    def __enter__(self) -> Any:
        llama_cpp.llama_set_abort_callback(self._ctx, self._callback, ctypes.c_void_p(0))
        self._installed = True
        return self._remove

    def __exit__(self, *_exc: object) -> None:
        self._remove()

    def _remove(self) -> None:
        if self._installed:
            null = llama_cpp.ggml_abort_callback(0)
            llama_cpp.llama_set_abort_callback(self._ctx, null, ctypes.c_void_p(0))
            self._installed = False


class TurnClock:
    """Timestamps of one turn, turned into statistics at the end."""

    def __init__(self, prompt_tokens: int, reused: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.reused = reused
        self.generated = 0
        self._start = time.perf_counter()
        self._first: float | None = None
        self._last: float | None = None

    def token(self) -> None:
        now = time.perf_counter()
        if self._first is None:
            self._first = now
        self._last = now
        self.generated += 1

    def stats(self, finish: FinishReason) -> GenerationStats:
        first = self._first or time.perf_counter()
        ttft = first - self._start
        decode_time = (self._last or first) - first
        evaluated = self.prompt_tokens - self.reused
        return GenerationStats(
            prompt_tokens=self.prompt_tokens,
            reused_prompt_tokens=self.reused,
            generated_tokens=self.generated,
            time_to_first_token_s=ttft,
            prompt_tokens_per_s=evaluated / ttft if ttft > 0 else 0.0,
            decode_tokens_per_s=(self.generated - 1) / decode_time if decode_time > 0 else 0.0,
            finish_reason=finish,
        )


class TextAssembler:
    """Bytes to text, never splitting a UTF-8 character or emitting part of a stop string."""

    def __init__(self, stop: Sequence[str]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(s for s in stop if s)
        self._held = ""
        self.stopped = False

    def feed(self, piece: bytes) -> str:
        if self.stopped:
            return ""
        self._held += self._decoder.decode(piece)
        for stop in self._stop:
            at = self._held.find(stop)
            if at >= 0:
                self.stopped = True
                text, self._held = self._held[:at], ""
                return text
        cut = len(self._held) - self._partial_stop_length()
        text, self._held = self._held[:cut], self._held[cut:]
        return text

    def flush(self) -> str:
        tail = "" if self.stopped else self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        return tail

    def _partial_stop_length(self) -> int:
        """Length of the longest tail of the held text that could begin a stop string."""
        longest = 0
        for stop in self._stop:
            for size in range(min(len(stop) - 1, len(self._held)), 0, -1):
                if self._held.endswith(stop[:size]):
                    longest = max(longest, size)
                    break
        return longest
