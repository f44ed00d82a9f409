"""One request while it occupies a sequence of the batch: prompt still to feed, reply so far.

A sequence first feeds its prompt in chunks, then carries one token per
decode step. It turns its sampled tokens into text the way the chat does
(UTF-8 safe, stop strings held back) and knows when it is done.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import llama_cpp

from engine.batch_results import BatchRequest, BatchResult
from engine.generation import TextAssembler, token_bytes
from engine.generation_stats import FinishReason
from engine.token_sampler import TokenSampler


class ActiveSequence:
    """A request in sequence slot `seq_id`; `n_past` tokens of it are in the KV cache."""

    def __init__(
        self,
        request: BatchRequest,
        seq_id: int,
        prompt: Sequence[int],
        stop: Sequence[str],
        reused: int,
        sampler: TokenSampler,
    ) -> None:
        self.request = request
        self.seq_id = seq_id
        self.prompt = list(prompt)
        self.reused = reused
        self.n_past = reused
        self.generated: list[int] = []
        self.sampler = sampler  # this sequence's own chain (its penalty window, its draws)
        self.pending_token: int | None = None  # sampled, not yet fed to llama_decode
        self.output_index: int | None = None  # where this step's logits are, if any
        self._text = TextAssembler(stop)
        self._pieces: list[str] = []
        self._started = time.perf_counter()

    @property
    def prompt_left(self) -> int:
        return max(len(self.prompt) - self.n_past, 0)

    @property
    def is_decoding(self) -> bool:
        return self.pending_token is not None

    def prompt_chunk(self, limit: int) -> list[int]:
        return self.prompt[self.n_past : self.n_past + limit]

    def accept(self, token: int, vocab: llama_cpp.llama_vocab_p, n_ctx: int) -> FinishReason | None:
        """Take a sampled token; the finish reason when the reply ends with it, else None."""
        self.generated.append(token)
        self.pending_token = None
        if llama_cpp.llama_vocab_is_eog(vocab, token):
            return FinishReason.STOP
        self._pieces.append(self._text.feed(token_bytes(vocab, token)))
        if self._text.stopped:
            return FinishReason.STOP
        if len(self.generated) >= self.request.max_tokens:
            return FinishReason.LENGTH
        if self.n_past >= n_ctx:
            return FinishReason.CONTEXT
        self.pending_token = token
        return None

    def result(self, finish: FinishReason, error: str | None = None) -> BatchResult:
        text = "" if error else "".join(self._pieces) + self._text.flush()
        return BatchResult(
            key=self.request.key,
            text=text,
            prompt_tokens=len(self.prompt),
            generated_tokens=len(self.generated),
            seconds=time.perf_counter() - self._started,
            finish_reason=finish,
            error=error,
            reused_prompt_tokens=self.reused,
            token_ids=tuple(self.generated),
        )
