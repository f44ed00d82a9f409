"""The step log learns on the real default model: a few dozen decode steps leave a correction
that predicts this machine's steps better than the cost model alone."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

from engine.generation.sampling import GREEDY
from engine.machine.hardware import probe_hardware
from engine.model.inventory import read_inventory
from engine.planning.execution import load_params_for
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan
from engine.planning.step_correction import CorrectionKey, StepCorrections
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import load_model
from engine.runtime.step_log import StepLog, StepRecord, latest_correction


def error(predicted_ms: float, record: StepRecord) -> float:
    return abs(predicted_ms - record.measured_ms) / record.measured_ms


def test_a_few_dozen_real_steps_leave_a_correction_that_predicts_better(
    default_model_file: Path,
    recorded_profile,
) -> None:
    """The recorded 2-core profile (another machine's figures, relabelled as this one's)
    predicts this machine's one-thread steps several-fold off; what the steps teach closes
    most of that."""
    recorded = recorded_profile
    profile = replace(recorded, fingerprint=probe_hardware().fingerprint())
    inventory = read_inventory(default_model_file)
    plan = make_plan(inventory, profile, PlanRequest(0, n_ctx=256))
    plan = replace(plan, n_threads=1, n_threads_batch=1)
    model = load_model(load_params_for(plan, inventory, str(default_model_file)))
    corrections = StepCorrections()
    try:
        steps = StepLog(model, plan, profile, corrections=corrections).attach()
        ChatSession(model).reply("Name three colours.", GREEDY.with_changes(max_tokens=40))
        records = steps.drain()
    finally:
        model.close()
    decode = [r for r in records if r.n_tokens == 1]
    key = CorrectionKey(plan.family_for(1), plan.tier_for(1))
    assert len(decode) >= 30 and all(r.key == key for r in decode)
    assert latest_correction(records, key) == corrections.get(key)
    assert corrections.get(key).steps == len(decode)
    assert decode[0].predicted_ms == decode[0].model_ms  # nothing learned before the first
    last = decode[-15:]
    corrected = statistics.median(error(r.predicted_ms, r) for r in last)
    alone = statistics.median(error(r.model_ms, r) for r in last)
    assert corrected < alone
