"""What the batched engine takes and gives: requests, results, steps and run totals.

Plain values that import nothing of llama.cpp (ChatMessage only for type
checking), so the GUI can carry results and totals without loading the
inference library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.generation.decode_step import DecodeStep
from engine.generation.stats import FinishReason

if TYPE_CHECKING:
    from engine.model.chat_message import ChatMessage


@dataclass(frozen=True)
class BatchRequest:
    """One prompt of a batch job; `key` comes back on its result (a file path, a chunk id)."""

    key: str
    messages: tuple[ChatMessage, ...]
    max_tokens: int

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if not self.messages:
            raise ValueError("a request needs at least one message")


@dataclass(frozen=True)
class BatchResult:
    """How one request ended; a failed request carries a one-line `error` and no text."""

    key: str
    text: str
    prompt_tokens: int
    generated_tokens: int
    seconds: float  # from the request's admission to its end
    finish_reason: FinishReason
    error: str | None = None
    reused_prompt_tokens: int = 0  # copied from the shared prefix instead of evaluated
    token_ids: tuple[int, ...] = ()  # the generated tokens, end-of-generation included


@dataclass
class BatchStats:
    """Totals of one run.

    A step may carry prompt chunks and decode tokens together; its time is
    split between prompt and decode by token share. On a CPU, where a prompt
    token costs about what a decode token costs inside a big step, that is
    close to the truth; it slightly flatters decode in mixed steps.
    """

    n_results: int = 0
    prompt_tokens: int = 0  # of all requests that started, reused ones included
    reused_prompt_tokens: int = 0
    evaluated_prompt_tokens: int = 0  # prompt tokens llama_decode computed (shared prefix too)
    generated_tokens: int = 0
    prompt_seconds: float = 0.0
    decode_seconds: float = 0.0
    wall_seconds: float = 0.0
    steps: int = 0
    finish_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def prompt_tokens_per_s(self) -> float:
        """Prompt tokens made ready per second of prompt work (reuse makes this go up)."""
        return self.prompt_tokens / self.prompt_seconds if self.prompt_seconds > 0 else 0.0

    @property
    def generated_tokens_per_s(self) -> float:
        return self.generated_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    @property
    def results_per_minute(self) -> float:
        return 60.0 * self.n_results / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def add_step(self, step: DecodeStep) -> None:
        self.steps += 1
        if not step.aborted:
            self.evaluated_prompt_tokens += step.n_prompt_tokens
        prompt_share = step.n_prompt_tokens / step.n_tokens if step.n_tokens else 0.0
        self.prompt_seconds += step.seconds * prompt_share
        self.decode_seconds += step.seconds * (1.0 - prompt_share)

    def add_result(self, result: BatchResult) -> None:
        self.n_results += 1
        if result.finish_reason is not FinishReason.ERROR:  # a refused prompt never ran
            self.prompt_tokens += result.prompt_tokens
        self.reused_prompt_tokens += result.reused_prompt_tokens
        self.generated_tokens += result.generated_tokens
        reason = result.finish_reason.value
        self.finish_reasons[reason] = self.finish_reasons.get(reason, 0) + 1
