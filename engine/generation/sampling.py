"""How the next token is chosen, as one frozen value passed down the stack.

Temperature 0 means greedy decoding, which is reproducible: the same prompt on
the same model gives the same reply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from engine.known_fields import known_fields


@dataclass(frozen=True)
class SamplingSettings:
    """Sampling knobs of one reply; `max_tokens` bounds the reply's length."""

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    max_tokens: int = 512

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0

    def with_changes(self, **changes: Any) -> SamplingSettings:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingSettings:
        return cls(**known_fields(cls, data))


GREEDY = SamplingSettings(temperature=0.0)
