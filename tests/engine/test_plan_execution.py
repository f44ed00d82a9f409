"""A plan becomes llama.cpp parameters, and every llama_decode is logged against its prediction."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from engine.errors import BadInputError
from engine.generation.sampling import GREEDY
from engine.machine.described_machines import load_described
from engine.machine.hardware import probe_hardware
from engine.machine.profile import Profile
from engine.model.inventory import read_inventory
from engine.planning.execution import check_profile_is_this_machine, load_params_for
from engine.planning.plan import PlanFamily, PlanRequest
from engine.planning.planner import make_plan
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import load_model
from engine.runtime.step_log import StepLog


@pytest.fixture(scope="module")
def cpu_profile(recorded_profile_here: Profile) -> Profile:
    """The recorded 2-core profile, relabelled as this machine's (the figures stay real)."""
    return recorded_profile_here


def test_a_cpu_plan_loads_with_its_threads_and_nothing_on_a_gpu(
    default_model_file: Path, cpu_profile: Profile
) -> None:
    inventory = read_inventory(default_model_file)
    plan = make_plan(inventory, cpu_profile, PlanRequest(0, n_ctx=1024))
    params = load_params_for(plan, inventory, str(default_model_file))
    assert (params.n_threads, params.n_threads_batch) == (plan.n_threads, plan.n_threads_batch)
    assert params.n_gpu_layers == 0 and params.tensor_overrides == ()
    assert params.op_offload_min_batch is None and params.n_ctx == 1024


def test_a_gpu_plan_where_llama_cpp_finds_no_gpu_is_refused_with_the_reason(
    default_model_file: Path,
) -> None:
    inventory = read_inventory(default_model_file)
    plan = make_plan(inventory, load_described("laptop-8gb"), PlanRequest(1 << 30, n_ctx=1024))
    assert plan.n_gpu_layers > 0
    reason = "no GPU device here .libggml-vulkan.so: no Vulkan GPU"  # the module's own word
    with pytest.raises(BadInputError, match=reason):
        load_params_for(plan, inventory, str(default_model_file))


def test_only_this_machines_own_profile_may_run_a_plan(cpu_profile: Profile) -> None:
    hardware = probe_hardware()
    check_profile_is_this_machine(cpu_profile, hardware)
    with pytest.raises(BadInputError, match="not this machine's"):
        check_profile_is_this_machine(
            replace(cpu_profile, fingerprint="0123456789abcdef"), hardware
        )
    with pytest.raises(BadInputError, match="not this machine's"):
        check_profile_is_this_machine(load_described("laptop-8gb"), hardware)


def test_every_llama_decode_is_logged_with_tier_family_and_both_times(
    default_model_file: Path, cpu_profile: Profile
) -> None:
    inventory = read_inventory(default_model_file)
    plan = make_plan(inventory, cpu_profile, PlanRequest(0, n_ctx=1024))
    model = load_model(load_params_for(plan, inventory, str(default_model_file)))
    try:
        steps = StepLog(model, plan, cpu_profile).attach()
        reply = ChatSession(model).reply("Name three colours.", GREEDY.with_changes(max_tokens=12))
        records = steps.drain()
    finally:
        model.close()
    prompt, *decodes = records
    assert prompt.n_tokens == reply.stats.prompt_tokens and prompt.n_past == 0
    assert prompt.tier == plan.tier_for(prompt.n_tokens)
    assert len(decodes) == reply.stats.generated_tokens - 1
    assert all(d.n_tokens == 1 and d.tier == 1 for d in decodes)
    assert [d.n_past for d in decodes] == list(
        range(prompt.n_tokens, prompt.n_tokens + len(decodes))
    )
    assert {r.family for r in records} == {PlanFamily.CPU_ONLY}
    assert all(r.predicted_ms > 0 and r.measured_ms > 0 for r in records)
    assert steps.drain() == []
