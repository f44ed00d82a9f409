"""The VRAM budget holds and tensors are where the plan says, on llama.cpp's own report."""

from __future__ import annotations

import pytest

from engine.child_process import run_in_child
from engine.llama.device_buffers import simulate_buffers
from engine.llama.load_params import DEFAULT_PARALLEL, LoadParams
from engine.machine.profile import Profile
from engine.model.default_model import default_model_path
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


def checked(
    inventory: ModelInventory, profile: Profile, budget_mib: int, shared_cells: int = 0, **kwargs
) -> PlanCheck:
    parallel = DEFAULT_PARALLEL if shared_cells else 0
    request = PlanRequest(
        budget_mib * MIB, n_ctx=512, parallel_sequences=parallel, shared_cells=shared_cells
    )
    plan = make_plan(inventory, profile, request)
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


@pytest.mark.parametrize("model", ["dense", "moe"])
def test_the_account_covers_the_one_context_every_activity_shares(
    gpu_models: dict[str, ModelInventory], lavapipe_profile: Profile, model: str
) -> None:
    """The chat's window, the API clients' and a job's documents are sequences of one context,
    whose cache and compute buffer llama.cpp reserves whole at load: the plan's account covers
    them."""
    check = checked(gpu_models[model], lavapipe_profile, 512, shared_cells=2048)
    vram, allocated = check.plan.vram, check.allocated
    assert check.plan.request.parallel_sequences == DEFAULT_PARALLEL
    assert allocated.device_bytes <= vram.total_bytes <= 512 * MIB
    assert same_logged_size(vram.kv_cache_bytes, allocated.role_bytes("kv"))
    error = check.account_without_margin / allocated.device_bytes - 1
    assert abs(error) <= ACCOUNT_TOLERANCE, f"{allocated.describe()} vs {vram}"


def test_one_context_reserves_one_compute_buffer_where_three_contexts_reserved_three() -> None:
    """The before figure: the chat's, the API pool's and a job's contexts (the same cells in
    all) each reserved a compute buffer on the device, whose output phase (the logits of a
    whole ubatch) does not shrink with fewer cells; with the default model's 49k-token
    vocabulary that is most of it. Reserved by llama.cpp, not allocated."""
    whole = LoadParams(str(default_model_path()), n_ctx=4096, n_gpu_layers=99)
    alone = {"n_parallel": 0, "n_ctx_shared": 0}
    pool = whole.n_ctx_shared // 2
    before = [
        whole.with_changes(**alone),  # the conversation's window
        whole.with_changes(n_ctx=pool, **alone),  # the API pool
        whole.with_changes(n_ctx=pool, **alone),  # a summary job
    ]
    after = simulate_buffers(whole).role_bytes("compute")
    before_bytes = sum(simulate_buffers(p).role_bytes("compute") for p in before)
    assert 0 < after < before_bytes / 2, (after / MIB, before_bytes / MIB)
