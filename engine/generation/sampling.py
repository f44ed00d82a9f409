"""How the next token is chosen, as one frozen value passed down the stack.

The same settings drive every path (chat, images, summaries, later the API):
`TokenSampler` turns them into one llama.cpp sampler chain. Defaults are what
people get from Ollama and LM Studio: temperature 0.7, top-k 40, top-p 0.95,
min-p 0.05 and a repetition penalty of 1.1 over the last 64 tokens; DRY and
the presence/frequency penalties are there, off unless asked for (as there).
Temperature 0 means greedy decoding, which is reproducible: the same prompt
on the same model gives the same reply.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from engine.known_fields import known_fields

WHOLE_CONTEXT = -1  # a penalty window of -1 looks back over the whole context


@dataclass(frozen=True)
class SamplingSettings:
    """Sampling knobs of one reply; `max_tokens` bounds the reply's length.

    Penalties look back over the reply's own tokens (`repeat_last_n` of them;
    -1: all): a summary must be free to repeat the document's words, not its
    own. DRY (p-e-w's "don't repeat yourself") penalises a token that would
    extend a sequence already said, more the longer the sequence beyond
    `dry_allowed_length`; it is what stops a model saying one sentence again
    and again. `seed` None draws from the model's seed; `stop` ends the reply
    at any of these strings (beside the template's own). `stop_loops` ends a
    reply that repeats itself anyway (finish reason "repetition").
    """

    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_last_n: int = WHOLE_CONTEXT
    seed: int | None = None
    stop: tuple[str, ...] = ()
    max_tokens: int = 512
    stop_loops: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", tuple(s for s in self.stop if s))
        for problem in _problems(self):
            raise ValueError(problem)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0

    @property
    def uses_dry(self) -> bool:
        return self.dry_multiplier > 0 and self.dry_last_n != 0

    def with_changes(self, **changes: Any) -> SamplingSettings:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stop"] = list(self.stop)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingSettings:
        known = known_fields(cls, data)
        if "stop" in known:
            known["stop"] = tuple(known["stop"] or ())
        return cls(**known)


def _problems(s: SamplingSettings) -> list[str]:
    """What is wrong with the settings, each as the one line a user reads."""
    checks = [
        (s.temperature >= 0, "temperature must be >= 0"),
        (s.top_k >= 0, "top_k must be >= 0 (0: off)"),
        (0 < s.top_p <= 1, "top_p must be in (0, 1]"),
        (0 <= s.min_p <= 1, "min_p must be in [0, 1]"),
        (s.repeat_penalty > 0, "repeat_penalty must be > 0 (1: off)"),
        (s.repeat_last_n >= WHOLE_CONTEXT, "repeat_last_n must be >= -1 (-1: whole context)"),
        (math.isfinite(s.presence_penalty), "presence_penalty must be a number"),
        (math.isfinite(s.frequency_penalty), "frequency_penalty must be a number"),
        (s.dry_multiplier >= 0, "dry_multiplier must be >= 0 (0: off)"),
        (s.dry_base >= 1, "dry_base must be >= 1"),
        (s.dry_allowed_length >= 0, "dry_allowed_length must be >= 0"),
        (s.dry_last_n >= WHOLE_CONTEXT, "dry_last_n must be >= -1 (-1: whole context)"),
        (s.seed is None or s.seed >= 0, "seed must be >= 0"),
        (s.max_tokens >= 1, "max_tokens must be >= 1"),
    ]
    return [message for ok, message in checks if not ok]


GREEDY = SamplingSettings(temperature=0.0, repeat_penalty=1.0)
"""Pure argmax: the model's own most likely token at every step, nothing penalised."""

SUMMARY_SAMPLING = SamplingSettings(
    temperature=0.0,
    repeat_penalty=1.1,
    repeat_last_n=WHOLE_CONTEXT,
    dry_multiplier=0.8,
    dry_allowed_length=3,
)
"""Summaries: greedy, so a folder summarised twice gives the same summaries and a summary
says what the model finds most likely rather than a creative draw; greedy decoding is also
what loops most, so a repetition penalty over the whole summary and DRY (llama.cpp's
suggested 0.8 / 1.75, letting three-token phrases such as "of the" recur) steer it away
from saying a sentence twice. Measured on a folder of licence texts, see README."""
