"""The running correction of the cost model: it converges on a biased machine, shrugs off
outliers, stays within its bounds, and is saved when due."""

from __future__ import annotations

import math
import random
import statistics

from engine.planning.plan import PlanFamily
from engine.planning.step_correction import (
    CLIP,
    FACTOR_BOUNDS,
    MEMORY,
    Correction,
    CorrectionKey,
    StepCorrections,
)

DECODE = CorrectionKey(PlanFamily.CPU_ONLY, 1)
PROMPT = CorrectionKey(PlanFamily.CPU_ONLY, 64)
BIAS = 2.5  # this machine runs 2.5x slower than the cost model says


def biased_session(n_steps: int, seed: int = 7) -> list[tuple[float, float, bool]]:
    """(cost model ms, measured ms, outlier) per step: measured = BIAS x predicted with 10 %
    noise, and every 23rd step slowed 10x by another program."""
    rng = random.Random(seed)
    steps = []
    for n in range(n_steps):
        predicted = rng.uniform(4.0, 20.0)
        outlier = n % 23 == 11
        measured = predicted * BIAS * math.exp(rng.gauss(0.0, 0.1)) * (10.0 if outlier else 1.0)
        steps.append((predicted, measured, outlier))
    return steps


def relative_errors(steps: list[tuple[float, float, bool]]) -> list[float]:
    """Each step's prediction (cost model x correction so far) against what it measured."""
    corrections, errors = StepCorrections(), []
    for predicted, measured, _outlier in steps:
        corrected = predicted * corrections.get(DECODE).factor
        errors.append(abs(corrected - measured) / measured)
        corrections.learn(DECODE, predicted, measured)
    return errors


def test_a_biased_machine_is_learned_and_predictions_get_close() -> None:
    steps = biased_session(300)
    errors = relative_errors(steps)
    uncorrected = [abs(p - m) / m for p, m, outlier in steps[-50:] if not outlier]
    last = [e for e, (*_, outlier) in zip(errors[-50:], steps[-50:], strict=True) if not outlier]
    assert errors[0] > 0.5  # the first step has only the cost model, 60 % off
    assert statistics.median(uncorrected) > 0.5
    assert statistics.median(last) < 0.1  # within the machine's own 10 % noise


def test_outliers_barely_move_a_settled_correction() -> None:
    corrections = StepCorrections()
    for predicted, measured, outlier in biased_session(200):
        before = corrections.get(DECODE).factor
        after = corrections.learn(DECODE, predicted, measured).factor
        if outlier and corrections.get(DECODE).steps > MEMORY:
            assert after / before < math.exp(CLIP / MEMORY) + 1e-9  # under 1.4 %
    assert abs(corrections.get(DECODE).factor / BIAS - 1) < 0.05


def test_a_first_step_that_is_an_outlier_is_soon_outweighed() -> None:
    corrections = StepCorrections()
    corrections.learn(DECODE, 10.0, 10.0 * BIAS * 10)
    for predicted, measured, _ in biased_session(30):
        corrections.learn(DECODE, predicted, measured)
    assert abs(corrections.get(DECODE).factor / BIAS - 1) < 0.15


def test_the_factor_stays_within_its_bounds() -> None:
    low, high = FACTOR_BOUNDS
    for ratio, bound in ((100.0, high), (0.001, low)):
        correction = Correction()
        for _ in range(3 * MEMORY):
            correction = correction.learned(10.0, 10.0 * ratio)
            assert low - 1e-12 <= correction.factor <= high + 1e-12
        assert math.isclose(correction.factor, bound)


def test_steps_without_usable_times_teach_nothing() -> None:
    settled = Correction(math.log(2.0), 80)
    for predicted, measured in ((0.0, 5.0), (5.0, 0.0), (math.inf, 5.0), (5.0, math.nan)):
        assert settled.learned(predicted, measured) == settled
    assert Correction().factor == 1.0 and Correction().steps == 0


def test_each_family_and_tier_learns_on_its_own() -> None:
    corrections = StepCorrections()
    for _ in range(20):
        corrections.learn(DECODE, 10.0, 25.0)
        corrections.learn(PROMPT, 100.0, 50.0)
    assert math.isclose(corrections.get(DECODE).factor, 2.5)
    assert math.isclose(corrections.get(PROMPT).factor, 0.5)
    assert corrections.get(CorrectionKey(PlanFamily.GPU_ONLY, 1)) == Correction()


def test_learning_continues_from_what_an_earlier_session_left() -> None:
    known = {DECODE: Correction(math.log(2.5), 400)}
    resumed = StepCorrections(known).learn(DECODE, 10.0, 25.0 * 2)  # one slow step
    assert resumed.steps == 401
    assert resumed.factor < 2.5 * math.exp(CLIP / MEMORY) + 1e-9


def test_changes_are_saved_when_due_and_on_flush() -> None:
    now, saved = [0.0], []
    corrections = StepCorrections(save=saved.append, save_every_s=5.0, clock=lambda: now[0])
    corrections.learn(DECODE, 10.0, 20.0)
    corrections.learn(PROMPT, 10.0, 20.0)
    assert saved == []
    now[0] = 5.0
    corrections.learn(DECODE, 10.0, 20.0)
    assert saved == [{DECODE: corrections.get(DECODE), PROMPT: corrections.get(PROMPT)}]
    corrections.flush()  # nothing new: nothing written
    assert len(saved) == 1
    corrections.learn(PROMPT, 10.0, 20.0)
    corrections.flush()
    assert saved[-1] == {PROMPT: corrections.get(PROMPT)}


def test_a_settled_correction_follows_a_lasting_change_within_a_few_hundred_steps() -> None:
    """Learned at 1x over 400 steps, then the machine runs 2.5x slower for good (another
    program took a core): the clipped average follows, if more slowly than from scratch."""
    steps = biased_session(300)
    corrections, errors = StepCorrections({DECODE: Correction(0.0, 400)}), []
    for predicted, measured, outlier in steps:
        if not outlier:
            errors.append(abs(predicted * corrections.get(DECODE).factor - measured) / measured)
        corrections.learn(DECODE, predicted, measured)
    first, last = statistics.median(errors[:50]), statistics.median(errors[-50:])
    assert first > 0.3 and last < 0.1 and last < first / 4
