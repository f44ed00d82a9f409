"""Many clients' streams in the parallel sequences of the resident model's one context:
llama.cpp server's slots, on ShardChat's scheduler.

Requests wait in arrival order and start as sequences (and the shared KV
pool's cells for their prompt and reply) free up; every step then carries
one token for each decoding stream and prompt chunks for the others, beside
the conversation's token and a summary job's documents, so four clients
asking at once ride one step, not four queued replies. The engine worker
admits the pool's requests before a job's documents, so clients keep
llama-server's order (arrival, no starvation) and a job fills what is left.

Chat clients resend the whole conversation every turn. A sequence keeps its
cells after its stream ends, and a new request goes to the free sequence
whose cache holds the longest opening of its prompt, unless taking it would
throw away more of another conversation than it saves (then an empty one,
or the one left longest ago, so a client coming back finds its own); when
another sequence holds a longer opening, it is copied over. Only the rest
is evaluated. So the n choices of one request evaluate their prompt once: the
first starts, the others wait until its prompt is in the cache and copy it.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field

from engine.errors import BadInputError
from engine.generation.scheduler import NoRoom
from engine.generation.stats import FinishReason
from engine.generation.stream import Stream, StreamRequest, identities_of
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
    # another choice of the same request: this one starts once that one's prompt is in the
    # cache, and copies it rather than evaluating it again
    after: PoolEntry | None = None

    @property
    def done(self) -> bool:
        return self.error is not None or (self.stream is not None and self.stream.done)

    @property
    def prompt_evaluated(self) -> bool:
        """Its prompt is in its sequence's cache (or it will never be: it ended)."""
        return self.done or (self.stream is not None and self.stream.prompt_left == 0)


class StreamPool:
    """The API's requests in the parallel sequences of `model`'s scheduler."""

    def __init__(self, model: LoadedModel, n_slots: int | None = None, window: int | None = None):
        self.model = model
        self.scheduler = model.scheduler
        self._waiting: collections.deque[PoolEntry] = collections.deque()
        self._running: dict[int, PoolEntry] = {}
        self._last_used = [0] * self.scheduler.n_sequences
        self._clock = 0
        self.limit(n_slots, window)

    def limit(self, n_slots: int | None, window: int | None) -> None:
        """Serve at most `n_slots` requests at once, each in at most `window` cells (the
        server's slots and context per slot), within what the loaded context holds.

        The context was shaped at load (engine.llama.context_shape); a server started
        later with more slots than it has sequences runs as many as there are, and
        the rest wait their turn."""
        n_parallel = self.model.params.n_parallel
        self.sequences = range(1, min(n_slots or n_parallel, n_parallel) + 1)
        room = self.scheduler.room(1) if n_parallel else 0
        self.window = min(window or room, room)

    @property
    def n_slots(self) -> int:
        return len(self.sequences)

    @property
    def n_ctx_per_slot(self) -> int:
        return self.window

    @property
    def busy(self) -> bool:
        return bool(self._waiting or self._running)

    @property
    def counts(self) -> tuple[int, int]:
        """(running, waiting) requests."""
        return len(self._running), len(self._waiting)

    def submit(
        self, request: StreamRequest, seed: int, label: str = "", after: PoolEntry | None = None
    ) -> PoolEntry:
        """Queue a request; it starts at the next step with a free sequence and room (with
        `after`, another choice of the same prompt, once that entry's prompt is evaluated:
        the prompt is evaluated once, as llama-server does for n choices)."""
        entry = PoolEntry(request, seed, label=label, after=after)
        self._waiting.append(entry)
        return entry

    def admit(self) -> list[PoolEntry]:
        """Start waiting requests in free sequences, in arrival order; the entries refused
        (cancelled before they started, or what they asked cannot run)."""
        ended = self._admit_waiting()
        for entry in list(self._waiting):
            if entry.request.cancel.cancelled:  # left before it started
                self._waiting.remove(entry)
                entry.error = "cancelled before it started"
                ended.append(entry)
        return ended

    def collect(self) -> list[PoolEntry]:
        """The running entries whose streams ended in the last step."""
        ended: list[PoolEntry] = []
        for seq_id, entry in list(self._running.items()):
            stream = entry.stream
            if stream is None or not stream.done:
                continue
            del self._running[seq_id]
            if stream.finish is FinishReason.CANCELLED and self.scheduler.slots[seq_id] is None:
                self.scheduler.forget(seq_id)
            log.info(
                "%s: %s after %d tokens (%d of %d prompt tokens from the cache)",
                entry.label or f"sequence {seq_id}", _finish_words(stream),
                len(stream.generated), stream.reused, len(stream.identities),
            )  # fmt: skip
            ended.append(entry)
        return ended

    def close(self, reason: str) -> list[PoolEntry]:
        """End every request (`reason` as their error); their sequences are freed."""
        ended = list(self._waiting) + list(self._running.values())
        for entry in ended:
            if entry.stream is not None and not entry.stream.done:
                self.scheduler.retire(entry.stream, FinishReason.ERROR)
                entry.stream.error = entry.stream.error or reason
            elif entry.stream is None:
                entry.error = reason
        self._waiting.clear()
        self._running.clear()
        return ended

    def _admit_waiting(self) -> list[PoolEntry]:
        refused: list[PoolEntry] = []
        while self._waiting:
            free = self.scheduler.free_sequences(self.sequences)
            if not free:
                break
            waiting_for = self._waiting[0].after
            if waiting_for is not None and not waiting_for.prompt_evaluated:
                break  # a step or a few; later arrivals keep their place behind it
            entry = self._waiting.popleft()
            if entry.request.cancel.cancelled:
                entry.error = "cancelled before it started"
                refused.append(entry)
                continue
            try:
                self._start(entry, free)
            except NoRoom:
                self._waiting.appendleft(entry)  # first in line when cells free up
                break
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
        held = {i: self.scheduler.held_prefix(i, identities) for i in self.sequences}
        seq_id = max(free, key=lambda i: (self._worth(i, held[i]), -self._last_used[i]))
        donor = max(self.sequences, key=lambda i: held[i])
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
