"""The pipelined executor on the device: uploads ahead change no token and stay in the account.

ShardChat's scheduler patch stages the weights a prompt step streams in rotating
slots and uploads them through a second queue ahead of the splits that use them
(engine.llama.prefetch). Here it runs on lavapipe against the serial copies of
the same plan: the same greedy tokens from bit-identical logits (the same kernels
read the same bytes, only when they arrive differs), for a dense and an MoE model
whose prompts stream partly, and llama.cpp's own buffer lines inside the plan's
account with the staging buffer in it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from engine.child_process import run_in_child
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory
from engine.planning.plan import Plan, PlanFamily, PlanRequest
from engine.planning.planner import make_plan
from engine.runtime.placement_report import PlanCheck, check_plan

MIB = 1024 * 1024
# A budget where the planner streams the dense model's prompt steps through staging slots
DENSE_BUDGET = 64 * MIB
# and where the MoE model's prompts stream most of its experts (a llama.cpp placement, op
# offload from 32: slots forced below), in steps of 128 tokens. The planner's own 60 MiB plan
# (steps of 128, offload from 128) crashes lavapipe in the decode after the prompt, on the
# release's unpatched scheduler too: a lavapipe or Vulkan-backend fault this suite avoids.
MOE_BUDGET = 40 * MIB
MOE_UBATCH = 128
GENERATE = 6
LOGGED = 0.006 * MIB  # llama.cpp logs sizes in MiB with two decimals
SLOT_ALIGNMENT = 4096  # per slot at most: the device buffer's alignment
ACCOUNT_TOLERANCE = 0.10  # as tests/gpu/test_vram_and_placement.py allows the estimate


def prompt_of(plan: Plan, steps: int = 3) -> tuple[int, ...]:
    """Several full prompt steps (each n_ubatch tokens, streamed), then a partial one."""
    assert plan.op_offload_min_batch <= plan.n_ubatch, plan.reason
    n_tokens = steps * plan.n_ubatch + plan.n_ubatch // 2
    return tuple(1 + (7 * i) % 4000 for i in range(n_tokens))


def run(
    plan: Plan, inventory: ModelInventory, profile: Profile, prompt: tuple[int, ...]
) -> PlanCheck:
    outcome = run_in_child(check_plan, (plan, inventory, profile, prompt, GENERATE), timeout_s=600)
    assert outcome.ok, outcome.failure
    return outcome.value


def on_and_off(
    plan: Plan, inventory: ModelInventory, profile: Profile, slots: int
) -> tuple[PlanCheck, PlanCheck]:
    prompt = prompt_of(plan)
    ahead = run(replace(plan, prefetch_slots=slots), inventory, profile, prompt)
    serial = run(replace(plan, prefetch_slots=0), inventory, profile, prompt)
    return ahead, serial


def test_the_planner_stages_a_partly_streamed_dense_models_prompts_within_its_budget(
    gpu_models: dict[str, ModelInventory], lavapipe_profile: Profile
) -> None:
    inventory = gpu_models["dense"]
    plan = make_plan(inventory, lavapipe_profile, PlanRequest(DENSE_BUDGET, n_ctx=512))
    assert plan.prefetch_slots >= 2, plan.prefetch_reason
    assert plan.family_for(plan.n_ubatch) is PlanFamily.GPU_ONLY
    ahead, serial = on_and_off(plan, inventory, lavapipe_profile, plan.prefetch_slots)

    assert ahead.tokens == serial.tokens
    assert ahead.logits is not None and serial.logits is not None
    assert np.array_equal(ahead.logits, serial.logits)

    staged = ahead.allocated.role_bytes("staging")
    assert serial.allocated.role_bytes("staging") == 0
    slack = LOGGED + plan.prefetch_slots * SLOT_ALIGNMENT
    assert abs(staged - plan.vram.staging_bytes) <= slack, (staged / MIB, plan.vram)
    # the staging buffer is in llama.cpp's compute buffer, and all of it inside the plan
    assert ahead.allocated.device_bytes <= plan.vram.total_bytes <= DENSE_BUDGET
    compute = ahead.allocated.role_bytes("compute")
    assert abs(compute / plan.vram.compute_bytes - 1) <= ACCOUNT_TOLERANCE, compute / MIB
    # the no-alloc reservation the planner checks against counts it the same way
    assert ahead.simulated_compute_bytes == ahead.allocated.role_bytes("compute")


def test_an_moe_models_used_experts_uploaded_ahead_give_the_same_tokens(
    gpu_models: dict[str, ModelInventory], lavapipe_profile: Profile
) -> None:
    """Experts are uploaded only once the router has chosen them: the up and down banks
    ahead of their splits, the gate bank when its router output is read."""
    inventory = gpu_models["moe"]
    plan = make_plan(inventory, lavapipe_profile, PlanRequest(MOE_BUDGET, n_ctx=512))
    plan = replace(plan, n_ubatch=MOE_UBATCH)
    streamed = {(s.block, s.kind) for s in inventory.all_sublayers()} - set(plan.resident)
    assert any(kind.value == "routed_experts" for _block, kind in streamed), plan.reason
    ahead, serial = on_and_off(plan, inventory, lavapipe_profile, 3)

    assert ahead.tokens == serial.tokens
    assert ahead.logits is not None and serial.logits is not None
    assert np.array_equal(ahead.logits, serial.logits)
    assert ahead.allocated.role_bytes("staging") > 0
