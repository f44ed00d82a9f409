"""Many clients' streams in the sequences of one context of the resident model: llama.cpp
server's slots, on ShardChat's scheduler.

Requests wait in arrival order and start as sequences free up; every step
then carries one token for each decoding stream and prompt chunks for the
others, so four clients asking at once are one tier-4 step, not four queued
replies. The context is separate from the model's own (the GUI's
conversation) and from a summary job's, so the engine worker can advance
each in turn without one disturbing another's KV cache.

Chat clients resend the whole conversation every turn. A sequence keeps its
cells after its stream ends, and a new request goes to the free sequence
whose cache holds the longest opening of its prompt, unless taking it would
throw away more of another conversation than it saves (then an empty one,
or the one left longest ago, so a client coming back finds its own); when
another sequence holds a longer opening, it is copied over. Only the rest
is evaluated.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field

from engine.errors import BadInputError
from engine.generation.decode_context import DecodeContext
from engine.generation.scheduler import Scheduler
from engine.generation.stats import FinishReason
from engine.generation.stream import Stream, StreamRequest, identities_of
from engine.planning.plan import Plan
from engine.runtime.loaded_model import LoadedModel

log = logging.getLogger(__name__)

MIN_COPIED_PREFIX = 32  # a shorter shared opening is cheaper to evaluate than to copy


@dataclass
class PoolEntry:
    """A request in the pool: waiting (`stream` None) or running in a sequence."""

    request: StreamRequest
    seed: int
    stream: Stream | None = None
    error: str | None = None  # refused at admission (the prompt did not fit)
    bad_input: bool = False  # refused for what it asked (BadInputError), not by a failure
    label: str = field(default="")

    @property
    def done(self) -> bool:
        return self.error is not None or (self.stream is not None and self.stream.done)


class StreamPool:
    """`n_slots` sequences of `n_ctx_per_slot` cells on the model's weights; close() frees
    them (the model stays)."""

    def __init__(
        self, model: LoadedModel, n_slots: int, n_ctx_per_slot: int, plan: Plan | None = None
    ) -> None:
        trained = model.inventory.context_length
        n_ctx_per_slot = min(n_ctx_per_slot, trained) if trained else n_ctx_per_slot
        context = DecodeContext.for_sequences(model.handle, model.params, n_slots, n_ctx_per_slot)
        self.model = model
        self.scheduler = Scheduler(context, plan)
        self.n_slots = n_slots
        self._waiting: collections.deque[PoolEntry] = collections.deque()
        self._running: dict[int, PoolEntry] = {}
        self._last_used = [0] * n_slots
        self._clock = 0

    @property
    def n_ctx_per_slot(self) -> int:
        return self.scheduler.n_ctx_per_sequence

    @property
    def busy(self) -> bool:
        return bool(self._waiting or self._running)

    @property
    def counts(self) -> tuple[int, int]:
        """(running, waiting) requests."""
        return len(self._running), len(self._waiting)

    def submit(self, request: StreamRequest, seed: int, label: str = "") -> PoolEntry:
        """Queue a request; it starts at the next step with a free sequence."""
        entry = PoolEntry(request, seed, label=label)
        self._waiting.append(entry)
        return entry

    def step(self) -> list[PoolEntry]:
        """Start waiting requests in free sequences, advance every stream one step; the
        entries that ended (refused ones included)."""
        ended = self._admit_waiting()
        for entry in list(self._waiting):
            if entry.request.cancel.cancelled:  # left before it started
                self._waiting.remove(entry)
                entry.error = "cancelled before it started"
                ended.append(entry)
        if self._running:
            for stream in self.scheduler.step():
                entry = self._running.pop(stream.seq_id)
                if stream.finish is FinishReason.CANCELLED:
                    self.scheduler.forget(stream.seq_id)
                log.info(
                    "%s: %s after %d tokens (%d of %d prompt tokens from the cache)",
                    entry.label or f"sequence {stream.seq_id}", _finish_words(stream),
                    len(stream.generated), stream.reused, len(stream.identities),
                )  # fmt: skip
                ended.append(entry)
        return ended

    def close(self, reason: str) -> list[PoolEntry]:
        """End every request (`reason` as their error) and free the context."""
        ended = list(self._waiting) + list(self._running.values())
        for entry in ended:
            if entry.stream is not None and not entry.stream.done:
                entry.stream.end(FinishReason.ERROR, reason)
            elif entry.stream is None:
                entry.error = reason
        self._waiting.clear()
        self._running.clear()
        self.scheduler.context.close()
        return ended

    def _admit_waiting(self) -> list[PoolEntry]:
        refused: list[PoolEntry] = []
        while self._waiting:
            free = [i for i, s in enumerate(self.scheduler.slots) if s is None]
            if not free:
                break
            entry = self._waiting.popleft()
            if entry.request.cancel.cancelled:
                entry.error = "cancelled before it started"
                refused.append(entry)
                continue
            try:
                self._start(entry, free)
            except BadInputError as exc:
                entry.error, entry.bad_input = str(exc), True
                refused.append(entry)
            except Exception as exc:  # a bug: this request ends, the others run on
                log.exception("%s could not start", entry.label or "a request")
                entry.error = f"it could not start: {exc!r}"
                refused.append(entry)
        return refused

    def _start(self, entry: PoolEntry, free: list[int]) -> None:
        identities = identities_of(entry.request.pieces)
        held = {i: self.scheduler.held_prefix(i, identities) for i in range(self.n_slots)}
        seq_id = max(free, key=lambda i: (self._worth(i, held[i]), -self._last_used[i]))
        donor = max(range(self.n_slots), key=lambda i: held[i])
        copy_from = donor if held[donor] >= held[seq_id] + MIN_COPIED_PREFIX else None
        entry.stream = self.scheduler.admit(entry.request, seq_id, entry.seed, copy_from)
        self._clock += 1
        self._last_used[seq_id] = self._clock
        self._running[seq_id] = entry
        log.info(
            "%s: sequence %d, %d prompt tokens, %d from the cache%s",
            entry.label or "request", seq_id, len(identities), entry.stream.reused,
            f" (copied from sequence {copy_from})" if copy_from is not None else "",
        )  # fmt: skip

    def _worth(self, seq_id: int, shared: int) -> float:
        """What starting in this sequence saves: the prompt tokens its cache holds, less the
        other cells it holds, which are lost (another client's conversation, kept for its
        next turn). Among equals, the sequence left longest ago is taken."""
        lost = self.scheduler.held_length(seq_id) - shared
        return shared - lost


def _finish_words(stream: Stream) -> str:
    finish = stream.finish or FinishReason.CANCELLED
    if finish is FinishReason.CANCELLED:
        return "cancelled, its cells freed"
    return f"finished ({finish.value})"
