"""One stream of tokens while it occupies a sequence of a context: what it asked for, what it
has fed, what it has said.

Every reply ShardChat generates is a stream: a chat turn, a vision turn (its
images are pieces of the prompt like its text runs) and each document of a
summary job. A stream first feeds its prompt - text in chunks, each image in
one go - then carries one token per decode step. It turns its sampled tokens
into text (UTF-8 safe, stop strings held back) and knows when it is done,
a reply that loops included (`loop_guard`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.cancel import CancelToken
from engine.generation.logprobs import TokenLogprob
from engine.generation.loop_guard import LoopGuard
from engine.generation.prompt_pieces import EncodedImage, Piece, TextRun
from engine.generation.sampling import SamplingSettings
from engine.generation.stats import FinishReason, GenerationStats
from engine.generation.text_assembly import TextAssembler, token_bytes
from engine.generation.token_sampler import TokenSampler
from engine.llama.handle import LlamaHandle

Identity = int | tuple[str, int]  # a text token's id, or (image digest, index in the image)


def identities_of(pieces: Sequence[Piece]) -> list[Identity]:
    """What each prompt position holds, for matching against what a sequence's cache holds."""
    out: list[Identity] = []
    for piece in pieces:
        if isinstance(piece, TextRun):
            out.extend(piece.tokens)
        else:
            out.extend((piece.digest, i) for i in range(piece.n_tokens))
    return out


def inside_image(identity: Identity) -> bool:
    """An image token after the image's first one (a cache cut there would halve the image)."""
    return isinstance(identity, tuple) and identity[1] > 0


@dataclass(frozen=True)
class StreamRequest:
    """What to generate: a prompt of text runs and images, how to sample, when to stop.

    With `reuse_cache`, the stream keeps what its sequence's KV cache already
    holds of the prompt (the earlier turns of a conversation) and evaluates
    only the rest. That is fast but not bit-exact: a prompt evaluated in other
    splits sums in another order, so a fresh conversation starts clean.
    """

    pieces: tuple[Piece, ...]
    settings: SamplingSettings
    stop: tuple[str, ...] = ()
    cancel: CancelToken = field(default_factory=CancelToken)
    key: str = ""
    reuse_cache: bool = True
    grammar: str | None = None  # GBNF the reply must follow (llama.cpp's grammar sampler)
    top_logprobs: int | None = None  # record each token's logprob and this many alternatives
    show_special: bool = False  # control tokens in the text (tool-call markers some models use)
    window: int | None = None  # the most cells prompt and reply may take (an API slot's
    # context); None: what its sequence may hold

    @classmethod
    def of_tokens(
        cls,
        tokens: Sequence[int],
        settings: SamplingSettings,
        stop: Sequence[str] = (),
        cancel: CancelToken | None = None,
        reuse_cache: bool = True,
    ) -> StreamRequest:
        pieces = (TextRun(tuple(tokens)),)
        return cls(pieces, settings, tuple(stop), cancel or CancelToken(), reuse_cache=reuse_cache)


class Stream:
    """A request in sequence `seq_id`; `n_past` positions of it are in the KV cache."""

    def __init__(
        self, request: StreamRequest, seq_id: int, sampler: TokenSampler, reused: int, n_past: int
    ) -> None:
        self.request = request
        self.seq_id = seq_id
        self.window = 0  # the cells prompt and reply may take, set when admitted
        self.identities = identities_of(request.pieces)
        self.sampler = sampler  # this stream's own chain (its penalty window, its draws)
        self.reused = reused
        self.fed = reused  # prompt identities in the cache
        self.n_past = n_past  # positions in the cache (an M-RoPE image takes fewer)
        self.generated: list[int] = []
        self.pending_token: int | None = None  # sampled, not yet fed to llama_decode
        self.output_index: int | None = None  # where this step's logits are, if any
        self.finish: FinishReason | None = None
        self.error: str | None = None
        self.clock = TurnClock(len(self.identities), reused)
        self._text = TextAssembler((*request.stop, *request.settings.stop))
        self._said: list[str] = []  # text not yet taken by the consumer
        self._reply: list[str] = []
        self._loops = LoopGuard() if request.settings.stop_loops else None
        self.kept_text: str | None = None  # a looping reply without its repeats
        self._logprobs: list[TokenLogprob] = []  # not yet taken by the consumer

    @property
    def prompt_left(self) -> int:
        return max(len(self.identities) - self.fed, 0)

    @property
    def is_decoding(self) -> bool:
        return self.pending_token is not None

    @property
    def done(self) -> bool:
        return self.finish is not None

    @property
    def text(self) -> str:
        """The reply; one ended for repetition without its repeats."""
        return "".join(self._reply) if self.kept_text is None else self.kept_text

    def next_image(self) -> EncodedImage | None:
        """The image the prompt continues with, if it continues with one."""
        piece, offset = self._current_piece()
        return piece if isinstance(piece, EncodedImage) and offset == 0 else None

    def prompt_chunk(self, limit: int) -> list[int]:
        """Up to `limit` text tokens of the prompt, within the current text run."""
        piece, offset = self._current_piece()
        if not isinstance(piece, TextRun):
            return []
        return list(piece.tokens[offset : offset + limit])

    def accept(self, token: int, handle: LlamaHandle, n_ctx: int) -> None:
        """Take a sampled token; sets `finish` when the reply ends with it."""
        self.clock.token()
        self.generated.append(token)
        self.pending_token = None
        if handle.is_end_of_generation(token):
            self.end(FinishReason.STOP)
            return
        piece = self._text.feed(token_bytes(handle.vocab, token, self.request.show_special))
        self._say(piece)
        if self._text.stopped:
            self.end(FinishReason.STOP)
        elif self._looped(token, piece, handle):
            self.end(FinishReason.REPETITION)
        elif len(self.generated) >= self.request.settings.max_tokens:
            self.end(FinishReason.LENGTH)
        elif self.n_past + 1 >= n_ctx:  # prompt and reply must fit the window together
            self.end(FinishReason.CONTEXT)
        else:
            self.pending_token = token

    def end(self, finish: FinishReason, error: str | None = None) -> None:
        """The stream is over: the held-back text is said (unless it failed)."""
        if self.finish is not None:
            return
        self.finish, self.error = finish, error
        if error is None:
            self._say(self._text.flush())
        self.sampler.close()

    def take_text(self) -> str:
        """The text said since the last call."""
        said, self._said = "".join(self._said), []
        return said

    def note_logprob(self, logprob: TokenLogprob) -> None:
        self._logprobs.append(logprob)

    def take_logprobs(self) -> list[TokenLogprob]:
        """The logprobs of the tokens sampled since the last call (with `top_logprobs`)."""
        taken, self._logprobs = self._logprobs, []
        return taken

    def stats(self) -> GenerationStats:
        return self.clock.stats(self.finish or FinishReason.CANCELLED)

    def _looped(self, token: int, piece: str, handle: LlamaHandle) -> bool:
        """Whether the reply now repeats itself; if so, what of it to keep is noted."""
        if self._loops is None:
            return False
        keep_tokens = self._loops.add_token(token)
        if keep_tokens is not None:
            kept = b"".join(token_bytes(handle.vocab, t) for t in self.generated[:keep_tokens])
            self.kept_text = kept.decode("utf-8", errors="ignore").rstrip()
            return True
        keep_chars = self._loops.add_text(piece)
        if keep_chars is not None:
            self.kept_text = "".join(self._reply)[:keep_chars].rstrip()
            return True
        return False

    def _say(self, piece: str) -> None:
        if piece:
            self._said.append(piece)
            self._reply.append(piece)

    def _current_piece(self) -> tuple[Piece | None, int]:
        start = 0
        for piece in self.request.pieces:
            size = len(piece.tokens) if isinstance(piece, TextRun) else piece.n_tokens
            if self.fed < start + size:
                return piece, self.fed - start
            start += size
        return None, 0


class TurnClock:
    """Timestamps of one stream, turned into statistics at the end."""

    def __init__(self, prompt_tokens: int, reused: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.reused = reused
        self.generated = 0
        self._start = time.perf_counter()
        self._first: float | None = None
        self._last: float | None = None

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self._start

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
