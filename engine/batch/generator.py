"""Generating replies to many prompts at once, with continuous batching, in the model's context.

On a CPU, one sequence's decode step is bound by reading the weights; a step
that carries one token for each of 16 sequences reads them once for all 16.
With the default model on 2 cores the aggregate decode speed rises 2x at
short contexts and about 1.7x at 700-token ones, where attention (which each
sequence pays for itself) weighs more. The generator keeps up to
`n_parallel` requests in flight in the parallel sequences of the model's one
context (engine.generation.decode_context): a finished sequence is refilled
from the (lazily read) request iterable at once, prompts are fed in chunks
that ride in the same llama_decode call as the running sequences' decode
tokens (and the conversation's, and API clients'), and the opening the
prompts share (system prompt, instruction) is evaluated once into the
context's last sequence and shared with each new one.

Cancelling: between steps we check the flag; a step carrying a prompt chunk
(which can take a second) also gets an abort flag llama.cpp reads between
graph nodes (engine.llama.abort_flag). Requests in flight end "cancelled"
with their partial text; requests not yet read from the iterable are left
unread.
"""

from __future__ import annotations

from collections.abc import Iterable

import llama_cpp

from engine.batch.results import BatchRequest, BatchResult, BatchStats
from engine.batch.run import BatchRun, ResultCallback, StepCallback
from engine.cancel import CancelToken
from engine.errors import BadInputError
from engine.generation.decode_step import DecodeStep
from engine.generation.sampling import GREEDY, SamplingSettings
from engine.planning.plan import Plan
from engine.runtime.loaded_model import LoadedModel

__all__ = [
    "BatchGenerator",
    "BatchRun",
    "BatchRequest",
    "BatchResult",
    "BatchStats",
    "DecodeStep",
]


class BatchGenerator:
    """Up to `n_parallel` sequences of `model`'s context decoding together.

    Whoever steps the model's scheduler advances a run (`BatchRun.admit`, the
    step, `BatchRun.collect`): the engine worker, beside the conversation and
    API clients, or `run` alone. With `share_prefix`, the context's last
    sequence holds the prompts' common opening. Each request's own max_tokens
    bounds its reply (settings.max_tokens is not used); a request's prompt and
    reply must fit `n_ctx_per_sequence` and wait for the shared pool's cells.
    """

    def __init__(
        self,
        model: LoadedModel,
        n_parallel: int,
        n_ctx_per_sequence: int,
        settings: SamplingSettings = GREEDY,
        plan: Plan | None = None,
        share_prefix: bool = True,
    ) -> None:
        if n_parallel < 1:
            raise ValueError("n_parallel must be at least 1")
        trained = model.inventory.context_length
        if trained and n_ctx_per_sequence > trained:
            raise BadInputError(
                f"{n_ctx_per_sequence} tokens per sequence exceed the {trained} the model was "
                "trained for"
            )
        available = model.params.n_parallel
        if available < 1:
            raise BadInputError("the model was loaded without parallel sequences (n_parallel 0)")
        self.model = model
        self.scheduler = model.scheduler
        self.n_parallel = min(n_parallel, available)
        self.sequences = range(1, self.n_parallel + 1)
        self.holder = self.scheduler.n_sequences - 1  # keeps the shared prompt opening
        self._n_ctx = min(n_ctx_per_sequence, self.scheduler.room(1))
        self.settings = settings
        self.share_prefix = share_prefix
        if plan is not None and self.scheduler.plan is None:
            self.scheduler.plan = plan
        self.runs_started = 0
        self._sequences_started = 0
        self._closed = False

    def next_seed(self) -> int:
        """A new sequence's sampler seed. With a fixed seed (the settings', else the model's)
        each sequence draws from its own stream (seed + its admission number), so a run is
        reproducible."""
        seed = self.model.params.seed if self.settings.seed is None else self.settings.seed
        if seed != llama_cpp.LLAMA_DEFAULT_SEED:  # the default means a random seed each
            seed = (seed + self._sequences_started) % llama_cpp.LLAMA_DEFAULT_SEED
        self._sequences_started += 1
        return int(seed)

    @property
    def plan(self) -> Plan | None:
        return self.scheduler.plan

    @property
    def n_ctx_per_sequence(self) -> int:
        return self._n_ctx

    @property
    def closed(self) -> bool:
        return self._closed or self.scheduler.context.closed

    def run(
        self,
        requests: Iterable[BatchRequest],
        on_result: ResultCallback,
        cancel: CancelToken | None = None,
        on_step: StepCallback | None = None,
    ) -> BatchStats:
        """Generate a reply for every request, stepping the scheduler here (nothing else may
        run on the model meanwhile); each result goes to `on_result` as it ends."""
        batch_run = self.start(requests, on_result, cancel, on_step)
        while batch_run.admit():
            self.scheduler.step()
            batch_run.collect()
        return batch_run.stats

    def start(
        self,
        requests: Iterable[BatchRequest],
        on_result: ResultCallback,
        cancel: CancelToken | None = None,
        on_step: StepCallback | None = None,
    ) -> BatchRun:
        """A run to drive step by step; it replaces any earlier run of this generator."""
        if self.closed:
            raise RuntimeError("the batch generator is closed")
        self.runs_started += 1
        return BatchRun(self, iter(requests), on_result, cancel or CancelToken(), on_step)

    def close(self) -> None:
        """End what runs in the generator's sequences and let go of their cells."""
        for seq_id in [*self.sequences, self.holder]:
            stream = self.scheduler.slots[seq_id]
            if stream is not None:
                self.scheduler.retire(stream)
            if not self.scheduler.context.closed:
                self.scheduler.forget(seq_id)
        self._closed = True

    def __enter__(self) -> BatchGenerator:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
