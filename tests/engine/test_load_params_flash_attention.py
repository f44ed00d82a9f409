"""Flash attention is the plan's choice: load parameters carry it to llama.cpp.

It used to be off wherever a GPU backend was registered, whatever the plan; now the
VRAM account models its buffers, so the plan decides and every load says what it chose.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.llama.load_params import LoadParams, make_llama_kwargs
from engine.machine.profile import Profile
from engine.model.inventory import read_inventory
from engine.planning.execution import load_params_for
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan


@pytest.fixture(scope="module")
def cpu_profile(recorded_profile: Profile) -> Profile:
    """The recorded 2-core profile: no GPU."""
    return recorded_profile


def test_llama_cpp_is_asked_for_the_flash_attention_the_parameters_carry() -> None:
    on, off = LoadParams("m.gguf"), LoadParams("m.gguf", flash_attn=False)
    assert make_llama_kwargs(on)["flash_attn"] is True
    assert make_llama_kwargs(off)["flash_attn"] is False


def test_saved_parameters_without_the_field_load_with_flash_attention_on() -> None:
    saved = LoadParams("m.gguf", n_ubatch=128).to_dict()
    del saved["flash_attn"]
    assert LoadParams.from_dict(saved) == LoadParams("m.gguf", n_ubatch=128)
    assert LoadParams.from_dict({**saved, "flash_attn": False}).flash_attn is False


def test_a_cpu_plan_loads_with_flash_attention_on(
    default_model_file: Path, cpu_profile: Profile
) -> None:
    """On the CPU it is faster (measured: 16% on prompts, 5% on decode)."""
    inventory = read_inventory(default_model_file)
    plan = make_plan(inventory, cpu_profile, PlanRequest(0, n_ctx=1024))
    assert plan.flash_attn
    assert load_params_for(plan, inventory, str(default_model_file)).flash_attn
