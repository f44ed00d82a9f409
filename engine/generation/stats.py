"""What a generation turn produces: streamed pieces, how it ended, what it cost.

Plain values with no llama.cpp import, so the app's events and the GUI can
carry them without loading the inference library.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any


class FinishReason(str, Enum):
    STOP = "stop"  # the model ended its turn (end-of-generation token or stop string)
    LENGTH = "length"  # max_tokens reached
    CONTEXT = "context"  # the context window (a batch sequence's share of it) is full
    REPETITION = "repetition"  # the reply repeated itself (engine.generation.loop_guard)
    CANCELLED = "cancelled"
    ERROR = "error"  # a batch request that failed alone (its result says why)

    @property
    def cut_short(self) -> bool:
        """The reply ran out of room, not of things to say."""
        return self in (FinishReason.LENGTH, FinishReason.CONTEXT)


@dataclass(frozen=True)
class GenerationStats:
    """What one turn cost: prompt size, reply size, latency and speeds."""

    prompt_tokens: int
    reused_prompt_tokens: int
    generated_tokens: int
    time_to_first_token_s: float
    prompt_tokens_per_s: float
    decode_tokens_per_s: float
    finish_reason: FinishReason

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["finish_reason"] = self.finish_reason.value
        return data


@dataclass(frozen=True)
class GenerationResponse:
    """One streamed piece: new text, or, last of all, the finish reason and statistics
    (and, for a reply ended for repetition, the reply without its repeats).

    A chat turn's text is the answer only; a reasoning model's thinking streams
    apart in `thinking` (engine.generation.thinking)."""

    text: str
    generated_tokens: int
    finish_reason: FinishReason | None = None
    stats: GenerationStats | None = None
    kept_text: str | None = None
    thinking: str = ""
