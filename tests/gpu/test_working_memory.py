"""Working memory on llama.cpp's own report: flash attention and the ubatch.

The planner trades resident weights for working memory: flash attention drops the
attention scores from the device compute buffer, a smaller ubatch shrinks every
activation and the logits. Both are only worth planning with if the VRAM account
predicts the buffer llama.cpp reserves for them, so this compares the two at a
long-ish context, with flash attention on and off and ubatches below 512, and loads
plans that chose a small ubatch to read back what they allocated. The formula is
over the context's cells, so these contexts hold one sequence; the one context with
every activity's sequences is checked in test_vram_and_placement.
"""

from __future__ import annotations

import pytest

from engine.child_process import run_in_child
from engine.llama.device_buffers import simulate_compute_buffers
from engine.llama.load_params import LoadParams
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan
from engine.planning.vram_account import compute_bytes
from engine.runtime.placement_report import check_plan

MIB = 1024 * 1024
LONG_CONTEXT = 4096
TOLERANCE = 0.10


@pytest.mark.parametrize("ubatch", [128, 256, 512])
@pytest.mark.parametrize("flash_attn", [True, False], ids=["flash", "no-flash"])
@pytest.mark.parametrize("model", ["dense", "moe"])
def test_the_compute_buffer_account_matches_llama_cpp(
    gpu_models: dict[str, ModelInventory], model: str, flash_attn: bool, ubatch: int
) -> None:
    inventory = gpu_models[model]
    every_layer = len(inventory.blocks) + 1  # the whole graph on the device
    params = LoadParams(
        inventory.path,
        n_ctx=LONG_CONTEXT,
        n_ubatch=ubatch,
        n_gpu_layers=every_layer,
        flash_attn=flash_attn,
        n_parallel=0,
        n_ctx_shared=0,
    )
    reserved = simulate_compute_buffers(params).role_bytes("compute")
    request = PlanRequest(256 * MIB, n_ctx=LONG_CONTEXT)
    predicted = compute_bytes(inventory, request, ubatch, flash_attn)
    assert abs(predicted / reserved - 1) <= TOLERANCE, (predicted / MIB, reserved / MIB)


def test_flash_attention_frees_most_of_the_buffer_at_a_long_context(
    gpu_models: dict[str, ModelInventory],
) -> None:
    """What the planner gains by it, in llama.cpp's figures, not only in ours."""
    inventory = gpu_models["dense"]
    reserved = {
        flash: simulate_compute_buffers(
            LoadParams(
                inventory.path,
                n_ctx=LONG_CONTEXT,
                n_gpu_layers=len(inventory.blocks) + 1,
                flash_attn=flash,
                n_parallel=0,
                n_ctx_shared=0,
            )
        ).role_bytes("compute")
        for flash in (True, False)
    }
    assert reserved[True] < reserved[False] / 4, reserved


@pytest.mark.parametrize(("model", "budget_mib"), [("dense", 128), ("moe", 24), ("moe", 64)])
def test_a_plan_with_a_small_ubatch_holds_on_llama_cpp_allocations(
    gpu_models: dict[str, ModelInventory], lavapipe_profile: Profile, model: str, budget_mib: int
) -> None:
    inventory = gpu_models[model]
    request = PlanRequest(budget_mib * MIB, n_ctx=LONG_CONTEXT)
    plan = make_plan(inventory, lavapipe_profile, request)
    assert plan.flash_attn and plan.n_ubatch < 512 and plan.resident, plan.reason
    outcome = run_in_child(check_plan, (plan, inventory, lavapipe_profile), timeout_s=300)
    assert outcome.ok, outcome.failure
    check = outcome.value
    allocated = check.allocated
    assert allocated.device_bytes <= plan.vram.total_bytes <= request.vram_budget_bytes
    assert check.simulated_compute_bytes == allocated.role_bytes("compute")
    error = check.account_without_margin / allocated.device_bytes - 1
    assert abs(error) <= TOLERANCE, f"{allocated.describe()} vs {plan.vram}"
    assert check.misplaced(inventory) == []
