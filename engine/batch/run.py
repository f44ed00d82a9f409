"""One pass of a batch job over a request stream, step by step, on the job's scheduler.

Each step fills free sequences from the (lazily read) requests, then lets
the scheduler run one step: a token for every decoding sequence and prompt
chunks for the others, sampled where logits came back. Driving a run step by
step lets the engine worker answer a chat between steps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Protocol

import jinja2

from engine.batch.results import BatchRequest, BatchResult, BatchStats
from engine.batch.shared_prefix import SharedPrefix
from engine.cancel import CancelToken
from engine.generation.decode_step import DecodeStep
from engine.generation.prompt_pieces import TextRun
from engine.generation.sampling import SamplingSettings
from engine.generation.scheduler import Scheduler
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
        self._holder = generator.n_parallel  # the sequence that keeps the shared prefix
        self._exhausted = False
        self._started = time.perf_counter()
        self.done = False
        self.stats = BatchStats()
        for stream in self._scheduler.active():  # what a replaced run left in flight
            self._scheduler.retire(stream)
        self._scheduler.forget_all()
        self._scheduler.drain_steps()

    def step(self) -> bool:
        """Fill free sequences and run one scheduler step; False once every request has ended.

        After a cancel, the next call ends the requests in flight as "cancelled".
        """
        if self.done:
            return False
        if self._id != self._gen.runs_started or self._gen.closed:
            raise RuntimeError("this batch run was replaced by a newer one or its generator closed")
        if not self._cancel.cancelled:
            self._fill_free_sequences()
            if self._scheduler.active():
                if self._exhausted:
                    self._close_gaps()
                ended = self._scheduler.step()
                self._count_steps()
                for stream in ended:
                    self._emit(_result_of(stream))
                return True
        self._end()
        return False

    def _end(self) -> None:
        for stream in self._scheduler.active():  # cancelled: what is in flight ends here
            self._scheduler.retire(stream)
            self._emit(_result_of(stream))
        self._count_steps()
        self.stats.wall_seconds = time.perf_counter() - self._started
        self.done = True

    # --- admission ---

    def _fill_free_sequences(self) -> None:
        arrivals: list[tuple[int, BatchRequest, list[int], tuple[str, ...]]] = []
        for seq_id in range(self._gen.n_parallel):
            if self._scheduler.slots[seq_id] is not None:
                continue
            arrival = self._next_admissible()
            if arrival is None:
                break
            arrivals.append((seq_id, *arrival))
        if not arrivals:
            return
        if self._prefix is not None:
            self._establish_prefix([tokens for _seq, _req, tokens, _stop in arrivals])
        for seq_id, request, tokens, stop in arrivals:
            self._start(seq_id, request, tokens, stop)

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
            if len(tokens) + 1 >= room:
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
        self._scheduler.admit(wanted, seq_id, seed, copy_from)

    def _establish_prefix(self, prompts: list[list[int]]) -> None:
        """Evaluate the prompts' common opening once, in the holder sequence."""
        assert self._prefix is not None
        shared = self._prefix.candidate(prompts)
        if shared and self._scheduler.prefill(self._holder, shared, lambda: self._cancel.cancelled):
            self._prefix.tokens = shared
            log.debug("shared prompt prefix: %d tokens evaluated once", len(shared))

    def _close_gaps(self) -> None:
        """Once no request is left, move the last sequences down into freed ones.

        llama.cpp runs each run of consecutive sequence ids as its own
        micro-batch, reading the weights once per run; moving a sequence costs
        one KV stream copy, paid back by the next decode step.
        """
        while True:
            free = [i for i in range(self._gen.n_parallel) if self._scheduler.slots[i] is None]
            active = self._scheduler.active()
            if not free or not active or free[0] > active[-1].seq_id:
                return
            mover = active[-1]
            log.debug("sequence %d moved to sequence %d", mover.seq_id, free[0])
            self._scheduler.move(mover, free[0])

    # --- results ---

    def _count_steps(self) -> None:
        for step in self._scheduler.drain_steps():
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
