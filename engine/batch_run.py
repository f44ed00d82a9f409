"""One pass of the batched engine over a request stream, step by step.

Each step fills free sequence slots from the (lazily read) requests, then
runs one llama_decode carrying a token for every decoding sequence and
prompt chunks for the others, and samples where logits came back. Driving a
run step by step lets the engine worker answer a chat between steps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Protocol

import jinja2

from engine.batch_context import DECODE_ABORTED, DECODE_OK, BatchContext
from engine.batch_results import BatchRequest, BatchResult, BatchStats, BatchStep
from engine.batch_sequence import ActiveSequence
from engine.cancel import CancelToken
from engine.generation_stats import FinishReason
from engine.plan import Plan
from engine.runtime import LoadedModel
from engine.shared_prefix import SharedPrefix
from engine.token_sampler import TokenSampler

log = logging.getLogger(__name__)


class RunOwner(Protocol):
    """What a run needs of the generator that starts it (engine.batch_generation's
    BatchGenerator): a protocol, so that the two modules do not depend on each other."""

    model: LoadedModel
    context: BatchContext
    n_parallel: int
    share_prefix: bool
    plan: Plan | None
    runs_started: int

    @property
    def n_ctx_per_sequence(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    def sampler(self) -> TokenSampler: ...


ResultCallback = Callable[[BatchResult], None]
StepCallback = Callable[[BatchStep], None]


class BatchRun:
    """One pass over a request stream: slots, what is left to read, the totals so far."""

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
        self._ctx = generator.context
        self._model = generator.model
        self._vocab = generator.model.llm._model.vocab
        self._requests = requests
        self._on_result = on_result
        self._cancel = cancel
        self._on_step = on_step
        self._slots: list[ActiveSequence | None] = [None] * generator.n_parallel
        self._prefix = SharedPrefix() if generator.share_prefix else None
        self._holder = generator.n_parallel  # the sequence that keeps the shared prefix
        self._exhausted = False
        self._started = time.perf_counter()
        self.done = False
        self.stats = BatchStats()
        self._ctx.forget_all()

    def step(self) -> bool:
        """Fill free slots and run one llama_decode; False once every request has ended.

        After a cancel, the next call ends the requests in flight as "cancelled".
        """
        if self.done:
            return False
        if self._id != self._gen.runs_started or self._gen.closed:
            raise RuntimeError("this batch run was replaced by a newer one or its generator closed")
        if not self._cancel.cancelled:
            self._fill_free_slots()
            if self._active():
                if self._exhausted:
                    self._close_gaps()
                self._step()
                return True
        self._end()
        return False

    def _end(self) -> None:
        for sequence in self._active():  # cancelled: what is in flight ends here
            self._finish(sequence, FinishReason.CANCELLED)
        self.stats.wall_seconds = time.perf_counter() - self._started
        self.done = True

    # --- admission ---

    def _fill_free_slots(self) -> None:
        arrivals: list[tuple[int, BatchRequest, list[int], tuple[str, ...]]] = []
        for slot, held in enumerate(self._slots):
            if held is not None:
                continue
            arrival = self._next_admissible()
            if arrival is None:
                break
            arrivals.append((slot, *arrival))
        if not arrivals:
            return
        if self._prefix is not None:
            self._establish_prefix([tokens for _slot, _req, tokens, _stop in arrivals])
        for slot, request, tokens, stop in arrivals:
            self._start(slot, request, tokens, stop)

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
            if len(tokens) >= room:
                self._refuse(
                    request, len(tokens),
                    f"the prompt has {len(tokens)} tokens; a sequence holds {room}, including "
                    "the reply: split the document into smaller parts",
                )  # fmt: skip
                continue
            return request, tokens, rendered.stop
        return None

    def _start(
        self, slot: int, request: BatchRequest, tokens: list[int], stop: tuple[str, ...]
    ) -> None:
        reused = self._prefix.reusable(tokens) if self._prefix is not None else 0
        if reused:
            self._ctx.copy(self._holder, slot)
            self._ctx.forget(slot, reused)  # the holder may hold more than this prompt shares
        else:
            self._ctx.forget(slot)
        self._slots[slot] = ActiveSequence(request, slot, tokens, stop, reused, self._gen.sampler())

    def _establish_prefix(self, prompts: list[list[int]]) -> None:
        """Evaluate the prompts' common opening once, in the holder sequence."""
        assert self._prefix is not None
        shared = self._prefix.candidate(prompts)
        if not shared:
            return
        self._ctx.forget(self._holder)
        for start in range(0, len(shared), self._ctx.n_batch):
            self._ctx.clear()
            for offset, token in enumerate(shared[start : start + self._ctx.n_batch]):
                self._ctx.add(token, start + offset, self._holder, False)
            if self._decode(n_prompt=self._ctx.n_tokens, n_sequences=1) != DECODE_OK:
                self._ctx.forget(self._holder)
                return
        self._prefix.tokens = shared
        log.debug("shared prompt prefix: %d tokens evaluated once", len(shared))

    def _close_gaps(self) -> None:
        """Once no request is left, move the last sequences down into freed slots.

        llama.cpp runs each run of consecutive sequence ids as its own
        micro-batch, reading the weights once per run; moving a sequence costs
        one KV stream copy, paid back by the next decode step.
        """
        while True:
            free = [slot for slot, held in enumerate(self._slots) if held is None]
            active = self._active()
            if not free or not active or free[0] > active[-1].seq_id:
                return
            mover, target = active[-1], free[0]
            self._ctx.copy(mover.seq_id, target)
            self._ctx.forget(mover.seq_id)
            self._slots[mover.seq_id], self._slots[target] = None, mover
            log.debug("sequence %d moved to slot %d", mover.seq_id, target)
            mover.seq_id = target

    # --- one llama_decode ---

    def _step(self) -> None:
        """One llama_decode: a token for each decoding sequence, prompt chunks for the others."""
        active = self._active()
        chunks = self._prompt_chunks(active)
        self._ctx.clear()
        for sequence in active:  # in sequence order: llama.cpp splits streams by it
            sequence.output_index = None
            if sequence.pending_token is not None:  # decoding
                sequence.output_index = self._ctx.add(
                    sequence.pending_token, sequence.n_past, sequence.seq_id, True
                )
            for offset, token in enumerate(chunks.get(sequence.seq_id, ())):
                last = sequence.n_past + offset == len(sequence.prompt) - 1
                index = self._ctx.add(token, sequence.n_past + offset, sequence.seq_id, last)
                sequence.output_index = index if last else None
        n_prompt = sum(len(c) for c in chunks.values())
        code = self._decode(n_prompt, n_sequences=len(active))
        if code == DECODE_ABORTED or self._cancel.cancelled:
            return
        if code != DECODE_OK:
            for sequence in active:
                self._finish(sequence, FinishReason.ERROR, f"llama_decode failed with code {code}")
            return
        for sequence in active:
            fed = len(chunks.get(sequence.seq_id, ())) + (1 if sequence.is_decoding else 0)
            sequence.n_past += fed
            if sequence.output_index is not None:
                self._sample_next(sequence)

    def _prompt_chunks(self, active: list[ActiveSequence]) -> dict[int, list[int]]:
        """Prompt tokens for this step within n_batch, the shortest remaining prompt first.

        A prompt that finishes early starts decoding early, and its decode tokens
        ride along in the steps that carry the longer prompts. Every prompt gets
        at least one token: llama.cpp runs a gap in the sequence ids as a separate
        micro-batch, which would read all the weights once more.
        """
        filling = sorted((s for s in active if s.prompt_left), key=lambda s: s.prompt_left)
        budget = self._ctx.n_batch - sum(1 for s in active if s.is_decoding) - len(filling)
        chunks: dict[int, list[int]] = {}
        for sequence in filling:
            extra = min(max(budget, 0), sequence.prompt_left - 1)
            chunks[sequence.seq_id] = sequence.prompt_chunk(1 + extra)
            budget -= extra
        return chunks

    def _decode(self, n_prompt: int, n_sequences: int) -> int:
        """llama_decode with timing; prompt steps can be aborted by the cancel token."""
        n_tokens = self._ctx.n_tokens
        started = time.perf_counter()
        code = self._ctx.decode(self._cancel if n_prompt else None)
        tier = self._gen.plan.tier_for(n_tokens) if self._gen.plan else None
        seconds = time.perf_counter() - started
        step = BatchStep(n_tokens, n_sequences, tier, seconds, n_prompt, code == DECODE_ABORTED)
        self.stats.add_step(step)
        log.debug(
            "batch llama_decode %d tokens (%d prompt, %d sequences) -> tier %s: %.2f ms%s",
            n_tokens, n_prompt, n_sequences, tier, 1e3 * seconds, " (aborted)" * step.aborted,
        )  # fmt: skip
        if self._on_step is not None:
            self._on_step(step)
        return code

    def _sample_next(self, sequence: ActiveSequence) -> None:
        assert sequence.output_index is not None
        token = self._ctx.sample(sequence.sampler, sequence.output_index)
        finish = sequence.accept(token, self._vocab, self._gen.n_ctx_per_sequence)
        if finish is not None:
            self._finish(sequence, finish)

    # --- results ---

    def _active(self) -> list[ActiveSequence]:
        return [s for s in self._slots if s is not None]

    def _finish(
        self, sequence: ActiveSequence, finish: FinishReason, error: str | None = None
    ) -> None:
        self._slots[sequence.seq_id] = None
        self._ctx.forget(sequence.seq_id)
        sequence.sampler.close()
        self._emit(sequence.result(finish, error))

    def _refuse(self, request: BatchRequest, prompt_tokens: int, reason: str) -> None:
        failed = FinishReason.ERROR
        self._emit(BatchResult(request.key, "", prompt_tokens, 0, 0.0, failed, reason))

    def _emit(self, result: BatchResult) -> None:
        self.stats.add_result(result)
        self._on_result(result)
