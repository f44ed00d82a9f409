"""The one token loop: every stream of a context advances in the same llama_decode steps.

A scheduler owns a loaded model's one decode context and runs each stream in a
sequence of it (llama.cpp's server calls them slots): a chat turn, a vision
turn, each API client and each document of a summary job are all streams.
Sequence 0 is the conversation on screen: its token or its prompt goes into
the very next step, first, and while it decodes the others get a budget of
tokens per step (engine.generation.step_budget) so its time between tokens
stays near its time alone. The other sequences share a pool of KV cells
beyond the conversation's window: a stream is admitted with its prompt and
its longest reply reserved (NoRoom while the pool lacks them; cells idle
sequences keep for a returning client are let go first), so no step ever
finds the cache full. One step carries one token for every decoding stream
and prompt chunks for the others, as engine.generation.step_composition
chooses (the shortest prompt first, so it starts decoding early; while several
wait, a step finishes a few of them); an image the prompt continues with is
evaluated in a step of its own, since embeddings and tokens cannot share a
llama batch. Where logits come back, the stream's own sampler chain draws
the next token. Each step is timed, given its plan tier, logged once here
and handed to the observers (the step log that sets it beside the plan's
prediction, a batch job's statistics).

What each sequence's KV cache holds is remembered position by position (a
text token by its id, an image token by its image's digest), so a stream
that continues a conversation evaluates only what changed; a change inside
an image re-evaluates the whole image, whose tokens attend to each other.

Cancelling: each stream has its own token, checked between steps; a step
that carries prompt tokens (which can take seconds) also gets an abort flag
that llama.cpp reads between graph nodes without Python
(engine.llama.abort_flag), raised by the token of any of its streams
cancelled meanwhile. The others are not advanced and run again in the next
step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from engine.cancel import CancelToken
from engine.errors import BadInputError
from engine.generation.decode_context import DECODE_ABORTED, DECODE_OK, DecodeContext
from engine.generation.decode_step import DecodeStep
from engine.generation.prompt_pieces import (
    EncodedImage,
    TextRun,
    check_prompt_fits,
    prompt_size,
)
from engine.generation.stats import FinishReason
from engine.generation.step_composition import StepComposer
from engine.generation.stream import Identity, Stream, StreamRequest, inside_image
from engine.generation.token_sampler import TokenSampler
from engine.llama.abort_flag import AbortFlag
from engine.planning.plan import Plan

log = logging.getLogger(__name__)

StepObserver = Callable[[DecodeStep], None]
CONVERSATION = 0  # the sequence of the conversation on screen


class NoRoom(Exception):
    """The shared KV pool cannot hold this stream's prompt and reply now; try after others end."""


@dataclass
class _Held:
    identity: Identity
    position: int  # where to cut the KV cache to drop this token and all after it


class Scheduler:
    """Streams in the sequences of one decode context, advanced together step by step."""

    def __init__(self, context: DecodeContext, plan: Plan | None = None) -> None:
        self.plan = plan
        self.observers: list[StepObserver] = []
        self.slots: list[Stream | None] = []
        self._before_decode: Callable[[], None] | None = None  # the current step's
        self.use_context(context)

    def use_context(self, context: DecodeContext) -> None:
        """Run in `context` from now on, every sequence empty: the model's context was
        re-created with another shape (LoadedModel.reshape). Its observers stay."""
        if self.context_in_use():
            raise RuntimeError("the context changes only while no stream runs in it")
        self.context = context
        self.slots = [None] * context.n_sequences
        self._held: list[list[_Held]] = [[] for _ in range(context.n_sequences)]
        self._end: list[int] = [0] * context.n_sequences  # each sequence's next position
        self._reserved: list[int] = [0] * context.n_sequences  # cells promised to a stream
        self.last_step: DecodeStep | None = None
        self.composer = StepComposer(context.n_batch)

    def context_in_use(self) -> bool:
        return any(stream is not None for stream in self.slots)

    @property
    def n_sequences(self) -> int:
        return self.context.n_sequences

    def room(self, seq_id: int) -> int:
        """The most cells sequence `seq_id` may hold (prompt and reply together)."""
        return self.context.rooms[seq_id]

    def active(self) -> list[Stream]:
        return [s for s in self.slots if s is not None]

    def free_sequences(self, among: range | None = None) -> list[int]:
        """Free sequences, beside the conversation's (or among `among`)."""
        ids = among if among is not None else range(1, self.n_sequences)
        return [i for i in ids if self.slots[i] is None]

    def pool_free(self) -> int:
        """Cells of the shared pool neither held nor reserved (per-sequence layout: a lot)."""
        if not self.context.unified:
            return 1 << 62
        used = sum(self._used(i) for i in range(1, self.n_sequences))
        return self.context.shared_cells - used

    # --- admission ---

    def admit(
        self, request: StreamRequest, seq_id: int, seed: int, copy_from: int | None = None
    ) -> Stream:
        """Start `request` in the free sequence `seq_id`, keeping what its cache holds of the
        prompt (with `request.reuse_cache`) or, when it shares more, what `copy_from` holds."""
        if self.slots[seq_id] is not None:
            raise RuntimeError(f"sequence {seq_id} is busy")
        size = prompt_size(request.pieces)
        room = min(self.room(seq_id), request.window or self.room(seq_id))
        check_prompt_fits(size, room)
        if not request.pieces or not isinstance(request.pieces[-1], TextRun):
            raise BadInputError("a prompt must end with text (the reply starts after it)")
        need = min(size + request.settings.max_tokens + 1, room)
        if seq_id != CONVERSATION:
            self._make_room(need, seq_id, copy_from)
        sampler = TokenSampler(request.settings, self.context.handle, seed, room, request.grammar)
        stream = Stream(request, seq_id, sampler, 0, 0)
        stream.window = room
        stream.reused, stream.n_past = self._reuse(seq_id, stream.identities, request, copy_from)
        stream.fed = stream.clock.reused = stream.reused
        self.slots[seq_id] = stream
        self._reserved[seq_id] = need if seq_id != CONVERSATION else 0
        return stream

    def held_prefix(self, seq_id: int, identities: list[Identity]) -> int:
        """How many leading prompt tokens sequence `seq_id`'s cache already holds."""
        return _reusable(self._held[seq_id], identities)

    def held_length(self, seq_id: int) -> int:
        """How many tokens sequence `seq_id`'s cache holds."""
        return len(self._held[seq_id])

    def retire(self, stream: Stream, finish: FinishReason = FinishReason.CANCELLED) -> None:
        """End a stream now (its consumer went away, or its job was cancelled)."""
        stream.end(finish)
        self._release(stream)

    def prefill(self, seq_id: int, tokens: tuple[int, ...], cancel: CancelToken | None) -> bool:
        """Evaluate tokens into a free sequence (from empty) without sampling: an opening
        that later streams copy. False if llama.cpp did not take them, `cancel` stopped
        them or the pool has no room for them now."""
        self.context.forget(seq_id)
        self._held[seq_id], self._end[seq_id] = [], 0
        try:
            if seq_id != CONVERSATION:  # the conversation has its own window, not the pool's
                self._make_room(len(tokens), seq_id, None)
        except NoRoom:
            return False
        for start in range(0, len(tokens), self.context.n_batch):
            self.context.clear()
            for offset, token in enumerate(tokens[start : start + self.context.n_batch]):
                self.context.add(token, start + offset, seq_id, False)
            with _abort_on_cancel([cancel] if cancel is not None else []) as abort:
                code = self._decode(self.context.n_tokens, (seq_id,), 0, abort)
            if code != DECODE_OK:
                self.context.forget(seq_id)
                self._held[seq_id], self._end[seq_id] = [], 0
                return False
        self._held[seq_id] = [_Held(t, i) for i, t in enumerate(tokens)]
        self._end[seq_id] = len(tokens)
        return True

    def forget(self, seq_id: int) -> None:
        """Drop a free sequence's cells (a cancelled stream's: nobody will continue it)."""
        if self.slots[seq_id] is not None:
            raise RuntimeError(f"sequence {seq_id} is busy")
        self.context.forget(seq_id)
        self._held[seq_id], self._end[seq_id] = [], 0

    def forget_all(self) -> None:
        """Drop every sequence's cells (no stream may be running)."""
        self.context.forget_all()
        self._held = [[] for _ in self.slots]
        self._end = [0] * len(self.slots)
        self._reserved = [0] * len(self.slots)

    # --- one step ---

    def step(self, before_decode: Callable[[], None] | None = None) -> list[Stream]:
        """Advance every stream by one llama_decode (and any image it continues with); the
        streams that ended.

        `before_decode` runs once the step is built, just before llama.cpp computes it:
        work another thread is handed there (a server's writes) runs while llama_decode
        has let the GIL go, not in turn with the Python that builds the step."""
        self._before_decode = before_decode
        streams = self.active()
        for stream in streams:
            if stream.request.cancel.cancelled:
                self.retire(stream)
        for stream in self.active():
            image = stream.next_image()
            if image is not None:
                self._feed_image(stream, image)
        stepping = [s for s in self.active() if s.is_decoding or s.prompt_chunk(1)]
        if stepping:
            self._feed_tokens(stepping)
        return [s for s in streams if s.done]

    def _feed_tokens(self, stepping: list[Stream]) -> None:
        chat = self.slots[CONVERSATION]
        stepping, chunks = self.composer.compose(stepping, chat)
        self.context.clear()
        for stream in stepping:  # in sequence order: llama.cpp splits streams by it
            stream.output_index = None
            if stream.pending_token is not None:
                stream.output_index = self.context.add(
                    stream.pending_token, stream.n_past, stream.seq_id, True
                )
            last = len(stream.identities) - 1
            for offset, token in enumerate(chunks.get(stream.seq_id, ())):
                wants = stream.fed + offset == last
                index = self.context.add(token, stream.n_past + offset, stream.seq_id, wants)
                stream.output_index = index if wants else stream.output_index
        n_prompt = sum(len(c) for c in chunks.values())
        n_outputs = sum(1 for s in stepping if s.output_index is not None)
        sequences = tuple(stream.seq_id for stream in stepping)
        watched = [stream.request.cancel for stream in stepping] if n_prompt else []
        with _abort_on_cancel(watched) as abort:
            code = self._decode(n_prompt, sequences, n_outputs, abort)
        if chat is not None and chat.is_decoding and chat in stepping and code == DECODE_OK:
            assert self.last_step is not None
            self.composer.budget.record(self.last_step.seconds, self.context.n_tokens - 1)
        if code != DECODE_OK:
            self._failed(stepping, code)
            return
        for stream in stepping:
            self._advance(stream, chunks.get(stream.seq_id, []))
            if stream.output_index is not None:
                index = stream.output_index
                token = self.context.sample(stream.sampler, index)
                n_top = stream.request.top_logprobs
                if n_top is not None:
                    stream.note_logprob(self.context.logprob(token, index, n_top))
                stream.accept(token, self.context.handle, stream.window)
                if stream.done:
                    self._release(stream)

    def _advance(self, stream: Stream, chunk: list[int]) -> None:
        """What the step put in the stream's cache."""
        fed: list[int] = [stream.pending_token] if stream.pending_token is not None else chunk
        held = self._held[stream.seq_id]
        held += [_Held(token, stream.n_past + i) for i, token in enumerate(fed)]
        stream.n_past += len(fed)
        stream.fed += len(chunk)
        self._end[stream.seq_id] = stream.n_past

    def _feed_image(self, stream: Stream, image: EncodedImage) -> None:
        self._decode_starts()
        started = time.perf_counter()
        with _abort_on_cancel([stream.request.cancel]) as abort:
            code = self.context.decode_image(image, stream.seq_id, stream.n_past, abort)
        seconds = time.perf_counter() - started
        aborted = code == DECODE_ABORTED
        step = DecodeStep(
            image.n_tokens, 1, self._tier(image.n_tokens), seconds, image.n_tokens, aborted,
            stream.n_past, 0, image=True, sequences=(stream.seq_id,),
        )  # fmt: skip
        self._record(step)
        if code != DECODE_OK:
            self._failed([stream], code)
            return
        held = self._held[stream.seq_id]
        held += [_Held((image.digest, i), stream.n_past) for i in range(image.n_tokens)]
        stream.n_past += image.n_pos
        stream.fed += image.n_tokens
        self._end[stream.seq_id] = stream.n_past

    def _failed(self, streams: list[Stream], code: int) -> None:
        """An aborted step leaves its streams as they were (the cancelled end next step); a
        failed one ends them. Either way the cells the step may have written are dropped."""
        for stream in streams:
            self.context.forget(stream.seq_id, stream.n_past)
            if code != DECODE_ABORTED:
                stream.end(FinishReason.ERROR, f"llama.cpp could not evaluate the step ({code})")
                self._release(stream)

    def _decode(
        self,
        n_prompt: int,
        sequences: tuple[int, ...],
        n_outputs: int,
        abort: AbortFlag | None,
    ) -> int:
        n_tokens = self.context.n_tokens
        n_past = self.context.first_position()
        self._decode_starts()
        started = time.perf_counter()
        code = self.context.decode(abort)
        seconds = time.perf_counter() - started
        step = DecodeStep(
            n_tokens, len(sequences), self._tier(n_tokens), seconds, n_prompt,
            code == DECODE_ABORTED, n_past, n_outputs, sequences=sequences,
        )  # fmt: skip
        self._record(step)
        return code

    def _decode_starts(self) -> None:
        """The step's `before_decode`, once."""
        hook, self._before_decode = self._before_decode, None
        if hook is not None:
            hook()

    def _tier(self, n_tokens: int) -> int | None:
        return self.plan.tier_for(n_tokens) if self.plan is not None else None

    def _record(self, step: DecodeStep) -> None:
        self.last_step = step
        if not step.image and not step.aborted:
            self.composer.step_costs.record(step.n_tokens, step.seconds)
        log.debug(
            "llama_decode %d %s (%d prompt, %d sequences) -> tier %s: %.2f ms%s",
            step.n_tokens, "embeddings" if step.image else "tokens", step.n_prompt_tokens,
            step.n_sequences, step.tier, 1e3 * step.seconds, " (aborted)" * step.aborted,
        )  # fmt: skip
        for observer in self.observers:
            observer(step)

    def _release(self, stream: Stream) -> None:
        if self.slots[stream.seq_id] is stream:
            self.slots[stream.seq_id] = None
            self._reserved[stream.seq_id] = 0
            self.composer.forget(stream.seq_id)

    def _used(self, seq_id: int) -> int:
        return max(len(self._held[seq_id]), self._reserved[seq_id])

    def _make_room(self, need: int, seq_id: int, copy_from: int | None) -> None:
        """Free shared cells for a stream needing `need` in `seq_id`: idle sequences' kept
        caches go, the largest first (never the one it copies from); NoRoom if running
        streams hold too much."""
        if not self.context.unified:
            return
        short = need - self._used(seq_id) - self.pool_free()
        idle = [
            i
            for i in range(1, self.n_sequences)
            if self.slots[i] is None and i not in (seq_id, copy_from) and self._held[i]
        ]
        for victim in sorted(idle, key=lambda i: -len(self._held[i])):
            if short <= 0:
                break
            short -= len(self._held[victim])
            self.forget(victim)
        if short > 0:
            raise NoRoom(f"the shared KV pool needs {short} more cells")

    def _reuse(
        self, seq_id: int, wanted: list[Identity], request: StreamRequest, copy_from: int | None
    ) -> tuple[int, int]:
        """Cut the sequence's cache to the prompt's longest held opening: (tokens, positions)."""
        own = _reusable(self._held[seq_id], wanted) if request.reuse_cache else 0
        copied = _reusable(self._held[copy_from], wanted) if copy_from is not None else 0
        if copy_from is not None and copied > own:
            self.context.copy(copy_from, seq_id)
            self._held[seq_id] = list(self._held[copy_from])
            self._end[seq_id] = self._end[copy_from]
            own = copied
        held = self._held[seq_id]
        cut = held[own].position if own < len(held) else self._end[seq_id]
        if own == 0:
            cut = 0
        self.context.forget(seq_id, cut)
        self._held[seq_id], self._end[seq_id] = held[:own], cut
        return own, cut


def _reusable(held: list[_Held], wanted: list[Identity]) -> int:
    """Leading tokens already in the cache; never all (the last one must give logits),
    never half an image."""
    keep = 0
    for entry, want in zip(held, wanted, strict=False):
        if entry.identity != want:
            break
        keep += 1
    keep = min(keep, len(wanted) - 1)
    while keep > 0 and inside_image(wanted[keep]):
        keep -= 1  # inside an image: back to its first token
    return max(keep, 0)


@contextmanager
def _abort_on_cancel(tokens: list[CancelToken]) -> Iterator[AbortFlag | None]:
    """A step's abort flag, raised by any of `tokens` cancelled while the step runs (at
    once if one already is); None for no tokens, so the step runs without a check."""
    if not tokens:
        yield None
        return
    flag = AbortFlag()
    with ExitStack() as watching:
        for token in tokens:
            watching.enter_context(token.watching(flag.raise_flag))
        yield flag
