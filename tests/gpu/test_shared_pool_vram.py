"""VRAM for weights, not idle cells: the window's load reserves only the conversation's KV
cells on the device, and the pool the API's clients and jobs share is made when one
starts, re-planned, inside the budget on llama.cpp's own buffer lines (lavapipe)."""

from __future__ import annotations

import pytest

from engine.child_process import run_in_child
from engine.llama.load_params import DEFAULT_SHARED_CELLS, padded_cells
from engine.machine.profile import Profile
from tests.gpu.scenarios import PoolRun, pool_on_demand

MIB = 1024 * 1024
LOGGED = 0.006 * MIB  # llama.cpp logs buffer sizes in MiB with two decimals


def run(model_file: str, profile: Profile, budget_mib: int) -> PoolRun:
    outcome = run_in_child(pool_on_demand, (model_file, profile, budget_mib), timeout_s=600)
    assert outcome.ok, outcome.failure
    return outcome.value


@pytest.mark.parametrize("budget_mib", [512, 100])
def test_the_pool_is_made_on_the_device_only_when_needed_and_inside_the_budget(
    default_model_file, lavapipe_profile: Profile, budget_mib: int
) -> None:
    pool = run(str(default_model_file), lavapipe_profile, budget_mib)
    before, after = pool.plan.vram, pool.pooled_plan.vram
    assert pool.plan.request.shared_cells == 0
    assert pool.pooled_plan.request.shared_cells == DEFAULT_SHARED_CELLS
    # the chat alone: only its own 1,024 cells on the device, as the plan counted them
    assert abs(pool.allocated.role_bytes("kv") - before.kv_cache_bytes) <= LOGGED
    # with the pool: llama.cpp's new KV buffer is the re-plan's, inside the budget
    assert abs(pool.pooled_allocated.role_bytes("kv") - after.kv_cache_bytes) <= LOGGED
    assert after.total_bytes <= budget_mib * MIB
    # the weights move only where the re-plan moved them
    assert pool.reloaded == (pool.pooled_plan.resident != pool.plan.resident)
    assert pool.reloaded == (budget_mib == 100)  # there the pool takes the weights' room
    if not pool.reloaded:  # the same layers' cells, 9 times as many; no weight read again
        cells = padded_cells(1024) + padded_cells(DEFAULT_SHARED_CELLS)
        assert after.kv_cache_bytes == before.kv_cache_bytes * cells // padded_cells(1024)
        assert pool.pooled_allocated.role_bytes("model") == 0
    else:
        assert after.weights_bytes < before.weights_bytes
    assert pool.reply, "a stream in the pool decodes"
