"""One pass of a batch job over a request stream, step by step, on the model's scheduler.

Before each step the run fills its free sequences from the (lazily read)
requests (`admit`); after it, it hands out the replies that ended
(`collect`). Whoever steps the scheduler in between decides what else rides
in the step: the engine worker's one loop puts the conversation's token and
API clients' streams in the same llama_decode.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Protocol

import jinja2

from engine.batch.results import BatchRequest, BatchResult, BatchStats
from engine.batch.shared_prefix import SharedPrefix
from engine.cancel import CancelToken
from engine.generation.decode_step import DecodeStep
from engine.generation.prompt_pieces import TextRun, prompt_fits
from engine.generation.sampling import SamplingSettings
from engine.generation.scheduler import NoRoom, Scheduler
from engine.generation.stats import FinishReason
from engine.generation.stream import Stream, StreamRequest
from engine.runtime.loaded_model import LoadedModel

log = logging.getLogger(__name__)


class RunOwner(Protocol):
    """What a run needs of the generator that starts it (engine.batch.generator's
    BatchGenerator): a protocol, so that the two modules do not depend on each other."""

    model: LoadedModel
    scheduler: Scheduler
    settings: SamplingSettings
    n_parallel: int
    sequences: range
    holder: int
    share_prefix: bool
    runs_started: int

    @property
    def n_ctx_per_sequence(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    def next_seed(self) -> int: ...


ResultCallback = Callable[[BatchResult], None]
StepCallback = Callable[[DecodeStep], None]


class BatchRun:
    """One pass over a request stream: what is left to read, the totals so far."""

    def __init__(
        self,
        generator: RunOwner,
        requests: Iterator[BatchRequest],
        on_result: ResultCallback,
        cancel: CancelToken,
        on_step: StepCallback | None,
    ) -> None:
        self._gen = generator
        self._id = generator.runs_started
        self._scheduler = generator.scheduler
        self._model = generator.model
        self._requests = requests
        self._on_result = on_result
        self._cancel = cancel
        self._on_step = on_step
        self._prefix = SharedPrefix() if generator.share_prefix else None
        self._holder = generator.holder  # the sequence that keeps the shared prefix
        self._exhausted = False
        self._next_up: tuple[BatchRequest, list[int], tuple[str, ...]] | None = None
        self._streams: dict[int, Stream] = {}
        self._started = time.perf_counter()
        self.done = False
        self.stats = BatchStats()
        for seq_id in [*generator.sequences, self._holder]:  # what a replaced run left
            stream = self._scheduler.slots[seq_id]
            if stream is not None:
                self._scheduler.retire(stream)
            self._scheduler.forget(seq_id)
        self._scheduler.observers.append(self._count_step)

    def admit(self) -> bool:
        """Fill free sequences before a step; False once every request has ended.

        After a cancel, the next call ends the requests in flight as "cancelled".
        """
        if self.done:
            return False
        if self._id != self._gen.runs_started or self._gen.closed:
            raise RuntimeError("this batch run was replaced by a newer one or its generator closed")
        if self._cancel.cancelled:
            self._end()
            return False
        self._fill_free_sequences()
        if not self._streams and self._exhausted and self._next_up is None:
            self._end()
            return False
        return True

    def collect(self) -> None:
        """After a step: the results of the replies that ended in it."""
        for seq_id, stream in list(self._streams.items()):
            if stream.done:
                del self._streams[seq_id]
                self._emit(_result_of(stream))

    def _end(self) -> None:
        for stream in self._streams.values():  # cancelled: what is in flight ends here
            if not stream.done:
                self._scheduler.retire(stream)
            self._emit(_result_of(stream))
        self._streams.clear()
        if self._count_step in self._scheduler.observers:
            self._scheduler.observers.remove(self._count_step)
        self.stats.wall_seconds = time.perf_counter() - self._started
        self.done = True

    # --- admission ---

    def _fill_free_sequences(self) -> None:
        arrivals: list[tuple[int, BatchRequest, list[int], tuple[str, ...]]] = []
        for seq_id in self._scheduler.free_sequences(self._gen.sequences):
            arrival = self._next_up or self._next_admissible()
            self._next_up = None
            if arrival is None:
                break
            arrivals.append((seq_id, *arrival))
        if not arrivals:
            return
        if self._prefix is not None and not self._streams:
            self._establish_prefix([tokens for _seq, _req, tokens, _stop in arrivals])
        for index, (seq_id, request, tokens, stop) in enumerate(arrivals):
            try:
                self._start(seq_id, request, tokens, stop)
            except NoRoom:  # the shared pool is full: the rest wait for cells, in order
                later = arrivals[index + 1 :]
                self._next_up = (request, tokens, stop)
                if later:
                    self._requests = itertools.chain(
                        (r for _s, r, _t, _st in later), self._requests
                    )
                return

    def _next_admissible(self) -> tuple[BatchRequest, list[int], tuple[str, ...]] | None:
        """The next request whose prompt fits a sequence; ones that do not fail alone."""
        while not self._exhausted and not self._cancel.cancelled:
            request = next(self._requests, None)
            if request is None:
                self._exhausted = True
                return None
            try:
                rendered = self._model.chat_template.render(request.messages)
                tokens = self._model.tokenize_prompt(rendered)
            except (ValueError, TypeError, jinja2.TemplateError) as exc:
                reason = (str(exc).splitlines() or [type(exc).__name__])[0]
                self._refuse(request, 0, f"the prompt could not be rendered ({reason})")
                continue
            room = self._gen.n_ctx_per_sequence
            if not prompt_fits(len(tokens), room):
                self._refuse(
                    request, len(tokens),
                    f"the prompt has {len(tokens)} tokens; a sequence holds {room}, including "
                    "the reply: split the document into smaller parts",
                )  # fmt: skip
                continue
            return request, tokens, rendered.stop
        return None

    def _start(
        self, seq_id: int, request: BatchRequest, tokens: list[int], stop: tuple[str, ...]
    ) -> None:
        shares = self._prefix is not None and self._prefix.reusable(tokens) > 0
        seed = self._gen.next_seed()
        settings = self._gen.settings.with_changes(max_tokens=request.max_tokens, seed=seed)
        pieces = (TextRun(tuple(tokens)),)
        wanted = StreamRequest(pieces, settings, stop, self._cancel, request.key, reuse_cache=False)
        copy_from = self._holder if shares else None
        self._streams[seq_id] = self._scheduler.admit(wanted, seq_id, seed, copy_from)

    def _establish_prefix(self, prompts: list[list[int]]) -> None:
        """Evaluate the prompts' common opening once, in the holder sequence."""
        assert self._prefix is not None
        shared = self._prefix.candidate(prompts)
        if shared and self._scheduler.prefill(self._holder, shared, self._cancel):
            self._prefix.tokens = shared
            log.debug("shared prompt prefix: %d tokens evaluated once", len(shared))

    # --- results ---

    def _count_step(self, step: DecodeStep) -> None:
        """Every step the run lives through (other activities' tokens may ride in it)."""
        self.stats.add_step(step)
        if self._on_step is not None:
            self._on_step(step)

    def _refuse(self, request: BatchRequest, prompt_tokens: int, reason: str) -> None:
        failed = FinishReason.ERROR
        self._emit(BatchResult(request.key, "", prompt_tokens, 0, 0.0, failed, reason))

    def _emit(self, result: BatchResult) -> None:
        self.stats.add_result(result)
        self._on_result(result)


def _result_of(stream: Stream) -> BatchResult:
    finish = stream.finish or FinishReason.CANCELLED
    return BatchResult(
        key=stream.request.key,
        text="" if stream.error else stream.text,
        prompt_tokens=len(stream.identities),
        generated_tokens=len(stream.generated),
        seconds=stream.clock.seconds,
        finish_reason=finish,
        error=stream.error,
        reused_prompt_tokens=stream.reused,
        token_ids=tuple(stream.generated),
    )
