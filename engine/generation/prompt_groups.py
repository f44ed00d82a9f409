"""How many waiting prompts one step finishes, so that first tokens come out early.

When several prompts wait together (a burst of API clients), a step that
evaluates them all gives every one of them its first token at the end of the
longest step there is: 16 clients of 37 prompt tokens on 2 cores waited 1.4 s
each, in one step of 512 tokens. Finishing a few per step gives the first of
them their tokens sooner and the last a little later, each extra step costing
what a step costs beside its tokens (the weights' read) plus the tokens of the
streams already decoding, which are not lost: they advance those streams.

With a step's time `fixed + per_token * n`, `d` the time of a step without the
prompts (its fixed cost and the decoding streams' tokens) and `p` the time of one
prompt's tokens, finishing `g` of `N` prompts a step gives them a mean time to
first token of `(N / g + 1) / 2 * (g * p + d)`, least at `g = sqrt(N * d / p)`.
Only `fixed / per_token` (the fixed cost in tokens) is needed, fitted over the
recent steps. Where a step's fixed cost is dear (weights streamed over PCIe for
every step) the groups grow until one step takes them all, as before; where
prompt tokens are dear (a CPU), a few prompts finish per step.
"""

from __future__ import annotations

import collections
import math

_WINDOW = 256  # recent steps the fit is over
_LEAST_STEPS = 3  # before this many, and while the sizes hardly vary, no fit
_LEAST_SPREAD = 8  # tokens: the steps' sizes must differ this much to fit a slope


class StepCostFit:
    """A step's time as a fixed cost plus a cost per token, fitted over recent steps."""

    def __init__(self) -> None:
        self._steps: collections.deque[tuple[int, float]] = collections.deque(maxlen=_WINDOW)

    def record(self, n_tokens: int, seconds: float) -> None:
        self._steps.append((n_tokens, seconds))

    def fixed_in_tokens(self) -> float | None:
        """The fixed cost of a step in tokens' worth (fixed / per token), by least squares;
        None while too few steps, or too alike in size, say it."""
        if len(self._steps) < _LEAST_STEPS:
            return None
        n = len(self._steps)
        mean_x = sum(x for x, _ in self._steps) / n
        mean_y = sum(y for _, y in self._steps) / n
        sizes = [x for x, _ in self._steps]
        if max(sizes) - min(sizes) < _LEAST_SPREAD:
            return None
        var_x = sum((x - mean_x) ** 2 for x in sizes) / n
        per_token = sum((x - mean_x) * (y - mean_y) for x, y in self._steps) / n / var_x
        if per_token <= 0:
            return None
        fixed = mean_y - per_token * mean_x
        return max(fixed, 0.0) / per_token


def prompts_to_finish(waiting: list[int], decoding: int, fixed_in_tokens: float) -> int:
    """How many of the `waiting` prompts (tokens left in each) the next step finishes,
    beside `decoding` streams' tokens: at least one, at most all."""
    if not waiting:
        return 0
    mean_prompt = sum(waiting) / len(waiting)
    d_over_p = (fixed_in_tokens + decoding) / max(mean_prompt, 1.0)
    return max(1, min(len(waiting), math.ceil(math.sqrt(len(waiting) * d_over_p))))
