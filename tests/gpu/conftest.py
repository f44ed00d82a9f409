"""The GPU tier: real llama.cpp allocations on a real (software) Vulkan device.

`make test-gpu` runs it with the one llama.cpp build of `make test` (its Vulkan
module) on Mesa's lavapipe, with GGML_VK_VISIBLE_DEVICES=0 (llama.cpp skips CPU-type Vulkan
devices otherwise). Without a Vulkan device every test here errors: a GPU tier that
silently ran on the CPU would check nothing.

Plans are made with the described 8 GB laptop's speeds (lavapipe's own speed means
nothing) and lavapipe's memory: its 2 GiB heap and a software device's margin.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from engine.llama.buffer_overrides import buffer_types
from engine.machine.described_machines import load_described
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, read_inventory
from engine.model.synthetic import write_synthetic_model
from engine.model.synthetic_specs import SMALL_DENSE, SMALL_MOE
from engine.planning.vram_account import margin_floor_for

LAVAPIPE_NAME = "llvmpipe (lavapipe, described laptop speeds)"
LAVAPIPE_HEAP = 2 * 1024**3
VULKAN_ENV = ("GGML_VK_VISIBLE_DEVICES", "GGML_VK_DISABLE_F16", "GGML_VK_DISABLE_COOPMAT")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session", autouse=True)
def vulkan_device() -> str:
    """The Vulkan device's buffer type; fails (not skips) where there is none."""
    missing = [name for name in VULKAN_ENV if name not in os.environ]
    if missing:
        pytest.fail(f"run the GPU tier through `make test-gpu` ({', '.join(missing)} unset)")
    names = [name for name, kind in buffer_types().items() if name.startswith("Vulkan")]
    devices = [n for n in names if not buffer_types()[n].is_host]
    if not devices:
        pytest.fail("no Vulkan device: is mesa-vulkan-drivers installed? (info --devices says why)")
    return devices[0]


@pytest.fixture(scope="session")
def lavapipe_profile() -> Profile:
    laptop = load_described("laptop-8gb")
    assert laptop.gpu is not None
    gpu = dataclasses.replace(
        laptop.gpu,
        name=LAVAPIPE_NAME,
        vram_total_bytes=LAVAPIPE_HEAP,
        backend="Vulkan",
        ggml_device="Vulkan0",
        margin_floor_bytes=margin_floor_for(LAVAPIPE_NAME),
    )
    return dataclasses.replace(laptop, gpu=gpu)


@pytest.fixture(scope="session")
def gpu_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModelInventory]:
    folder = tmp_path_factory.mktemp("gpu-models")
    return {
        name: read_inventory(write_synthetic_model(folder / f"{name}.gguf", spec, "Q8_0"))
        for name, spec in (("dense", SMALL_DENSE), ("moe", SMALL_MOE))
    }
