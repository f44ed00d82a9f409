"""What this machine has taught the cost model: a running correction per plan family and tier.

The cost model predicts a llama_decode step from the profile's micro-benchmarks;
a real model on a real machine runs some constant factor away from that (cache
effects the micro-models miss, Python work per step, a CPU that clocks lower
under load). The step log measures every step, so each (family, tier) keeps a
factor, measured / predicted, that the next like step is predicted with.

Why this estimator: an exponentially weighted mean of log(measured / predicted),
each sample's log-ratio clipped to within CLIP of the current estimate.
- Logs, because the error is a ratio: 2x slow and 2x fast weigh the same.
- Clipping around the estimate (a Huber-style mean) bounds what any one step
  can do: a step slowed 10x by another program moves the factor by at most
  ALPHA * log 2, about 1.4 %, while genuine drift still gets through, a little
  each step.
- Its whole state is two numbers (the log-factor and the steps it rests on), so
  it is saved as one row per profile, model, family and tier; a windowed median
  would have to keep its window.
The first MEMORY steps are averaged plainly (weight 1/n), so a fresh correction
settles in a few steps instead of creeping from 1; the factor always stays in
FACTOR_BOUNDS, so a bad run can never make a prediction absurd.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from engine.planning.plan import PlanFamily

FACTOR_BOUNDS = (0.25, 4.0)  # the correction never says more than 4x either way
CLIP = math.log(2.0)  # a sample counts as at most 2x away from the current factor
MEMORY = 50  # steps: the EWMA's weight is 1/MEMORY once that many were seen
SAVE_EVERY_S = 5.0  # at most one save of what was learned this often

_LOG_LOW, _LOG_HIGH = (math.log(bound) for bound in FACTOR_BOUNDS)


@dataclass(frozen=True, order=True)
class CorrectionKey:
    """Which steps share a correction: those of one plan family and tier."""

    family: PlanFamily
    tier: int


@dataclass(frozen=True)
class Correction:
    """measured / predicted for one family and tier, as a log, and the steps it rests on."""

    log_factor: float = 0.0
    steps: int = 0

    @property
    def factor(self) -> float:
        """What the cost model's prediction is multiplied by (1: nothing learned yet)."""
        return math.exp(self.log_factor)

    def learned(self, predicted_ms: float, measured_ms: float) -> Correction:
        """This correction after one more step; a step with no usable times changes nothing."""
        if not (predicted_ms > 0 and measured_ms > 0) or math.isinf(predicted_ms + measured_ms):
            return self
        sample = math.log(measured_ms / predicted_ms)
        if self.steps > 0:
            sample = _within(sample, self.log_factor - CLIP, self.log_factor + CLIP)
        weight = 1.0 / min(self.steps + 1, MEMORY)
        estimate = self.log_factor + weight * (sample - self.log_factor)
        return Correction(_within(estimate, _LOG_LOW, _LOG_HIGH), self.steps + 1)


Saver = Callable[[Mapping[CorrectionKey, Correction]], None]


class StepCorrections:
    """The corrections of one model under one profile, learning from every step.

    `known`: what earlier sessions learned (from the profile store). `save` is
    called with the corrections changed since the last save, at most every
    `save_every_s` seconds of `clock` and on `flush`; it runs on the thread that
    records steps (the engine worker's), never the GUI's.
    """

    def __init__(
        self,
        known: Mapping[CorrectionKey, Correction] | None = None,
        save: Saver | None = None,
        save_every_s: float = SAVE_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._corrections = dict(known or {})
        self._save, self._save_every_s, self._clock = save, save_every_s, clock
        self._unsaved: set[CorrectionKey] = set()
        self._saved_at = clock()

    def get(self, key: CorrectionKey) -> Correction:
        return self._corrections.get(key, Correction())

    def all(self) -> dict[CorrectionKey, Correction]:
        return dict(self._corrections)

    def learn(self, key: CorrectionKey, predicted_ms: float, measured_ms: float) -> Correction:
        """One step of `key` predicted (by the cost model alone) and measured; saves when due."""
        corrected = self.get(key).learned(predicted_ms, measured_ms)
        self._corrections[key] = corrected
        self._unsaved.add(key)
        if self._clock() - self._saved_at >= self._save_every_s:
            self.flush()
        return corrected

    def flush(self) -> None:
        """Save what changed since the last save now (a model about to be closed)."""
        self._saved_at = self._clock()
        if self._save is None or not self._unsaved:
            return
        changed = {key: self._corrections[key] for key in sorted(self._unsaved)}
        self._unsaved.clear()
        self._save(changed)


def _within(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)
