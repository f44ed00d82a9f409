"""The plan's predicted speed, corrected by what the model's steps taught the cost model, says
so in the status bar and the VRAM panel; with nothing learned the words stay as they were."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from app.screen_text.plan_words import (
    correction_words,
    decode_correction,
    predicted_decode_tps,
    speed_against_plan,
)
from app.screen_text.units import speed_text
from app.screen_text.vram_overview import vram_overview
from engine.machine.calibration import CPU_KIND, kind_error
from engine.model.inventory import read_inventory
from engine.planning.plan import Plan, PlanFamily, PlanRequest
from engine.planning.planner import make_plan
from engine.planning.step_correction import Correction
from engine.runtime.step_log import StepRecord


@pytest.fixture(scope="module")
def cpu_plan(default_model_file: Path, recorded_profile) -> Plan:
    """The default model on the recorded 2-core machine: every step runs on the CPU."""
    return make_plan(
        read_inventory(default_model_file), recorded_profile, PlanRequest(0, n_ctx=1024)
    )


def step(tier: int, factor: float, steps: int, family: PlanFamily = PlanFamily.CPU_ONLY):
    """A logged step whose family and tier had learned `factor` over `steps` steps."""
    learned = Correction(math.log(factor), steps)
    return StepRecord(tier, 100, tier, family, 10.0, 10.0, 10.0, learned)


def test_a_reply_whose_decode_steps_learned_shows_the_corrected_prediction(cpu_plan) -> None:
    model_tps = predicted_decode_tps(cpu_plan)
    assert model_tps is not None and model_tps > 10
    steps = [step(1, 1.5, 398), step(256, 3.0, 4), step(1, 1.25, 400)]  # the last one counts
    corrected = model_tps / 1.25
    assert decode_correction(cpu_plan, steps) == steps[-1].correction
    assert predicted_decode_tps(cpu_plan, steps[-1].correction) == pytest.approx(corrected)
    measured = corrected * 0.9
    assert speed_against_plan(measured, cpu_plan, steps) == (
        f"{speed_text(measured, 'tokens/s')} (plan predicted {corrected:.1f}, "
        f"corrected from {model_tps:.0f} after 400 steps: 90%)"
    )


def test_with_nothing_learned_for_decode_the_words_stay_as_they_were(cpu_plan) -> None:
    model_tps = predicted_decode_tps(cpu_plan)
    assert model_tps is not None
    half = speed_text(model_tps / 2, "tokens/s")
    as_before = f"{half} (plan predicted {model_tps:.1f}, 50%)"
    assert speed_against_plan(model_tps / 2, cpu_plan) == as_before
    other_tier = [step(256, 3.0, 40)]  # a prompt's correction says nothing of decoding
    other_family = [step(1, 3.0, 40, PlanFamily.GPU_ONLY)]  # nor another family's
    unlearned = [step(1, 1.0, 0)]  # a step logged without corrections
    for steps in (other_tier, other_family, unlearned):
        assert decode_correction(cpu_plan, steps) is None
        assert speed_against_plan(model_tps / 2, cpu_plan, steps) == as_before
    assert correction_words(cpu_plan, None) == ""
    assert decode_correction(None, other_tier) is None


def test_small_speeds_and_a_single_step_are_said_plainly(cpu_plan) -> None:
    model_tps = predicted_decode_tps(cpu_plan)
    assert model_tps is not None
    slow = Correction(math.log(4.0), 1)
    assert correction_words(cpu_plan, slow) == f"corrected from {model_tps:.0f} after 1 step"
    assert correction_words(None, slow) == ""


def test_the_vram_overview_predicts_with_the_correction_and_says_from_what(cpu_plan) -> None:
    model_tps = predicted_decode_tps(cpu_plan)
    assert model_tps is not None
    plain = vram_overview(cpu_plan, None)
    assert plain.chat_tokens_per_s == model_tps
    # not corrected yet: how sure, from the calibration table's CPU rows (issue 29)
    assert plain.chat_correction == f"±{kind_error(CPU_KIND):.0%} on CPU-only machines"
    learned = vram_overview(cpu_plan, None, correction=Correction(math.log(2.0), 400))
    assert learned.chat_tokens_per_s == pytest.approx(model_tps / 2)
    assert learned.chat_correction == f"corrected from {model_tps:.0f} after 400 steps"
