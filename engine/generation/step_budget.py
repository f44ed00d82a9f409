"""How many other tokens may ride in a step beside the conversation's next token.

The conversation on screen is never starved: its token or its prompt goes
into the very next step. But every token that rides with it makes that step
longer, and a client's or a job's long prompt would turn the chat's steady
stream of words into stalls. So while the conversation decodes, the other
streams get a budget of tokens per step, steered by what the steps measure:
the time of a step carrying the conversation's token, against its time alone
(re-measured now and then with a step of its own), is kept under
`TARGET_RATIO`. The budget shrinks when a step ran over and grows back while
steps run well under, so on a machine where a decode token costs little
beside the weights' read (a GPU, a big CPU) the others lose nothing, and
where prompt tokens are dear they are fed a few at a time.
"""

from __future__ import annotations

TARGET_RATIO = 1.5  # the conversation's time between tokens, at most, against alone
_SHRINK_ABOVE = 1.4  # a step this much over solo cuts the budget
_GROW_BELOW = 1.2  # a step this close to solo lets it grow
_RESOLO_EVERY = 64  # steps with companions between two solo measurements
_START = 16
_LEAST = 0.1  # companions still advance: one token every ten steps at worst


class StepBudget:
    """The companions' token budget for steps that carry the conversation's decode token."""

    def __init__(self, most: int) -> None:
        self.most = most  # never more than the batch holds
        self.tokens: float = min(_START, most)  # per step, on average: below 1, some steps none
        self.solo_seconds: float | None = None
        self._since_solo = 0
        self._credit = 0.0
        self._recent: float | None = None  # the conversation's step time, a moving average

    def take(self, ready: int = 1) -> int:
        """Companion tokens for the next step: the budget, a fraction carried to later steps.

        `ready` is how many companions wait to decode. Credit is saved until it carries
        all of them in one step: on a CPU, where a second token costs as much as the
        first (2.1x a one-token step on 2 cores) and nine cost 5x, one step every few
        carrying all companions makes far more tokens for the same average time between
        the conversation's tokens than one companion in every other step."""
        if self.wants_solo():
            return 0
        self._credit = min(self._credit + self.tokens, self.most)
        if self._credit < max(1, min(ready, self.most)):
            return 0
        granted = int(self._credit)
        self._credit -= granted
        return granted

    def wants_solo(self) -> bool:
        """Whether the next conversation step should run alone, to measure its time."""
        return self.solo_seconds is None or self._since_solo >= _RESOLO_EVERY

    def record(self, seconds: float, companions: int) -> None:
        """A step that carried the conversation's decode token and `companions` others.

        What is steered is the conversation's time between tokens on average (steps
        with companions and without), against its steps alone."""
        self._recent = seconds if self._recent is None else 0.8 * self._recent + 0.2 * seconds
        if companions == 0:
            alone = seconds if self.solo_seconds is None else self.solo_seconds
            self.solo_seconds = 0.5 * alone + 0.5 * seconds
            self._since_solo = 0
            return
        self._since_solo += 1
        if self.solo_seconds is None:
            return
        ratio = self._recent / self.solo_seconds
        if ratio > _SHRINK_ABOVE:
            self.tokens = max(_LEAST, self.tokens * 0.7)
        elif ratio < _GROW_BELOW:
            self.tokens = min(self.most, self.tokens * 1.25 + 0.1)
