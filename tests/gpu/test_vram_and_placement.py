"""The VRAM budget holds and tensors are where the plan says, on llama.cpp's own report."""

from __future__ import annotations

import pytest

from engine.child_process import run_in_child
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory
from engine.planning.plan import NEVER_OFFLOAD, PlanFamily, PlanRequest
from engine.planning.planner import make_plan
from engine.runtime.placement_report import PlanCheck, check_plan

MIB = 1024 * 1024
BUDGETS_MIB = (64, 128, 256)
ACCOUNT_TOLERANCE = 0.10  # an account more than 10 % above what is allocated wastes VRAM
LOGGED = 0.006 * MIB  # llama.cpp logs buffer sizes in MiB with two decimals


def same_logged_size(predicted: int, logged: int) -> bool:
    return abs(predicted - logged) <= LOGGED


def checked(inventory: ModelInventory, profile: Profile, budget_mib: int, **kwargs) -> PlanCheck:
    plan = make_plan(inventory, profile, PlanRequest(budget_mib * MIB, n_ctx=512))
    outcome = run_in_child(check_plan, (plan, inventory, profile), timeout_s=300, **kwargs)
    assert outcome.ok, outcome.failure
    return outcome.value


@pytest.mark.parametrize("budget_mib", BUDGETS_MIB)
@pytest.mark.parametrize("model", ["dense", "moe"])
def test_the_budget_holds_on_llama_cpp_allocations(
    gpu_models: dict[str, ModelInventory], lavapipe_profile: Profile, model: str, budget_mib: int
) -> None:
    check = checked(gpu_models[model], lavapipe_profile, budget_mib)
    vram, allocated = check.plan.vram, check.allocated
    assert check.plan.resident, "the budget should hold part of the model"
    assert allocated.device_bytes <= vram.total_bytes <= budget_mib * MIB
    assert same_logged_size(vram.weights_bytes, allocated.role_bytes("model"))
    assert same_logged_size(vram.kv_cache_bytes, allocated.role_bytes("kv"))
    error = check.account_without_margin / allocated.device_bytes - 1
    assert abs(error) <= ACCOUNT_TOLERANCE, f"{allocated.describe()} vs {vram}"
    # llama.cpp's own no-alloc reservation agrees with what it then allocated
    assert check.simulated_compute_bytes == allocated.role_bytes("compute")


@pytest.mark.parametrize("model", ["dense", "moe"])
def test_resident_tensors_are_on_the_device_and_the_rest_in_host_memory(
    gpu_models: dict[str, ModelInventory], lavapipe_profile: Profile, model: str
) -> None:
    inventory = gpu_models[model]
    check = checked(inventory, lavapipe_profile, 64)
    names = [n for sub in inventory.all_sublayers() for n in sub.tensor_names]
    resident = set(check.plan.resident_tensor_names)
    assert 0 < len(resident) < len(names), "a partial placement is what this checks"
    assert check.misplaced(inventory) == []
    on_device = {n for n, where in check.tensor_devices.items() if where.startswith("Vulkan0")}
    assert on_device == resident


def test_a_cpu_plan_on_a_gpu_build_allocates_nothing_on_the_device(
    gpu_models: dict[str, ModelInventory], lavapipe_profile: Profile
) -> None:
    check = checked(gpu_models["dense"], lavapipe_profile, 0)
    assert check.plan.tiers[0].chosen.family is PlanFamily.CPU_ONLY
    assert check.plan.op_offload_min_batch == NEVER_OFFLOAD
    assert check.allocated.device_bytes == 0, check.allocated.describe()
