"""Our reproduction of llama.cpp's --fit against llama.cpp's own, on a real device.

`make test-gpu` builds llama-fit-params from the vendored llama.cpp
(tests/gpu/fit_params/main.cpp around common/fit.cpp) and names it in
FIT_PARAMS_TOOL. lavapipe reports its 2 GiB heap as free, so each budget is
emulated with fit's margin (--fit-target): free minus margin is what fit may use.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.llama.ggml_devices import device_memory
from engine.model.inventory import ModelInventory
from engine.planning.fit_tool import MIB, measured_memory, reproduced, run_tool
from engine.planning.plan import PlanRequest

REQUEST = PlanRequest(0, n_ctx=512)
TARGETS_MIB = range(8, 129, 8)  # from no block to every block on the device, for both models


@pytest.fixture(scope="module")
def fit_tool() -> Path:
    tool = Path(os.environ.get("FIT_PARAMS_TOOL", ""))
    if not tool.is_file():
        pytest.fail("FIT_PARAMS_TOOL names no llama-fit-params: run the tier through make test-gpu")
    return tool


@pytest.mark.parametrize("model", ["dense", "moe"])
def test_the_reproduction_chooses_what_llama_cpp_fit_chooses(
    fit_tool: Path, gpu_models: dict[str, ModelInventory], vulkan_device: str, model: str
) -> None:
    inventory = gpu_models[model]
    free, _total = device_memory(vulkan_device)
    memory = measured_memory(inventory, inventory.path, REQUEST)
    choices = {}
    for target in (t * MIB for t in TARGETS_MIB):
        tool = run_tool(fit_tool, inventory, REQUEST, free, target)
        assert reproduced(inventory, REQUEST, target, memory) == tool, f"target {target // MIB}"
        choices[target // MIB] = tool
    # the sweep went through fit's branches: some layers, all layers, and (MoE) partial ones
    layer_counts = {c.n_gpu_layers for c in choices.values()}
    assert -1 in layer_counts and len(layer_counts) >= 4, choices
    if inventory.is_moe:
        assert any(c.host_expert_blocks for c in choices.values()), choices
