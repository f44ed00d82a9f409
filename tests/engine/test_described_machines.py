"""Described profiles: the shipped files are current, and the cost model ranks them sensibly."""

from __future__ import annotations

import dataclasses
from importlib.resources import files
from pathlib import Path

import pytest

from engine.errors import BadInputError
from engine.machine.datasheets import DESCRIBED_MACHINES, LAPTOP_8GB, PCIE_LANE_GBPS
from engine.machine.described_machines import (
    describe,
    described_names,
    load_described,
    write_described_files,
)
from engine.machine.described_names import shipped_names
from engine.machine.hardware_info import HardwareInfo
from engine.machine.profile import Device, KernelShape, Profile, ProfileMode
from engine.model.inventory import ModelInventory, SubLayerKind, read_inventory
from engine.planning.cost_model import CostModel, Placement, Where

NAMES = described_names()
ALL_GPU = Placement(default=Where.GPU)
ALL_CPU = Placement(default=Where.CPU)
MAX_FILE_BYTES = 200_000


@pytest.fixture(scope="module")
def inventory(make_synthetic) -> ModelInventory:
    path = make_synthetic("llama", "Q4_0", n_layer=4, n_embd=512, n_head=8, n_head_kv=8, n_ff=1536)
    return read_inventory(path)


def shipped_file(name: str):
    return files("engine.machine") / "described" / f"{name}.json"


USERS_MACHINES = (
    "laptop-8gb", "desktop-16gb", "rtx5090-desktop", "rtx3060-desktop", "rtx4090-desktop",
    "rx7900xtx-vulkan", "arc-a770-vulkan",
)  # fmt: skip
TABLE_MACHINES = (
    "a10-server", "rtx3090-vulkan", "rx5700xt-vulkan", "rtx2080-i9-10900x", "m1max-metal",
)  # fmt: skip


def test_the_users_machines_come_first_then_the_calibration_tables() -> None:
    assert NAMES == USERS_MACHINES + TABLE_MACHINES


@pytest.mark.parametrize("name", NAMES)
def test_a_described_gpu_says_its_backend(name: str) -> None:
    sheet, profile = DESCRIBED_MACHINES[name], load_described(name)
    assert profile.gpu is not None and profile.gpu.backend == sheet.gpu_backend
    (gpu,) = HardwareInfo.from_dict(profile.hardware).gpus
    assert gpu.backend == sheet.gpu_backend
    assert (sheet.compute_capability is None) == ("NVIDIA" not in sheet.gpu_name)


@pytest.mark.parametrize("name", NAMES)
def test_fixed_costs_the_roofline_misses_are_in_the_profile(name: str) -> None:
    sheet, profile = DESCRIBED_MACHINES[name], load_described(name)
    assert profile.gpu is not None
    assert profile.gpu.layer_overhead_s == sheet.gpu_layer_overhead_s > 0
    assert profile.expert_overhead_s == {
        "cpu": sheet.cpu_expert_overhead_s,
        "gpu": sheet.gpu_expert_overhead_s,
    }


@pytest.mark.parametrize("name", NAMES)
def test_shipped_profile_is_described_with_the_datasheet_gpu(name: str) -> None:
    profile, sheet = load_described(name), DESCRIBED_MACHINES[name]
    assert profile.mode is ProfileMode.DESCRIBED and profile.is_described
    assert "not measured" in profile.description
    assert profile.gpu is not None and profile.gpu.vram_total_bytes == sheet.vram_bytes
    link_gbps = PCIE_LANE_GBPS[sheet.pcie_generation] * sheet.pcie_width
    assert profile.gpu.h2d_pinned_gbps == pytest.approx(link_gbps * 0.8, rel=1e-4)
    hardware = HardwareInfo.from_dict(profile.hardware)
    (gpu,) = hardware.gpus
    link = (gpu.pcie_generation_max, gpu.pcie_width_max)
    assert link == (sheet.pcie_generation, sheet.pcie_width)
    assert gpu.vram_total_bytes == sheet.vram_bytes
    assert profile.fingerprint == hardware.fingerprint()


@pytest.mark.parametrize("name", NAMES)
def test_shipped_file_is_small_round_trips_and_is_up_to_date(name: str) -> None:
    assert len(shipped_file(name).read_bytes()) < MAX_FILE_BYTES
    profile = load_described(name)
    assert Profile.from_json(profile.to_json()) == profile
    assert profile == describe(DESCRIBED_MACHINES[name])


def test_regenerated_files_match_the_shipped_ones_byte_for_byte(tmp_path: Path) -> None:
    paths = write_described_files(tmp_path)
    assert [p.name for p in paths] == [f"{name}.json" for name in NAMES]
    for path, name in zip(paths, NAMES, strict=True):
        assert path.read_bytes() == shipped_file(name).read_bytes()


def test_one_token_points_sit_on_the_bandwidth_roof() -> None:
    profile = load_described("laptop-8gb")
    assert profile.gpu is not None

    def point(device: Device, threads: int):
        return next(
            k
            for k in (profile.cpu_kernels if device is Device.CPU else profile.gpu.kernels)
            if (k.device, k.shape, k.quant, k.threads, k.n_tokens)
            == (device, KernelShape.DENSE, "Q4_0", threads, 1)
        )

    cpu = point(Device.CPU, LAPTOP_8GB.physical_cores)
    assert cpu.weight_gbps == pytest.approx(profile.dram_read_gbps, rel=0.02)
    gpu = point(Device.GPU, 1)  # its time carries the per-block launch cost besides the bytes
    on_the_roof_s = gpu.seconds_per_layer - profile.gpu.layer_overhead_s
    assert gpu.bytes_per_layer / on_the_roof_s / 1e9 == pytest.approx(
        profile.gpu.memory_gbps, rel=1e-3
    )


def test_a_datasheet_without_every_quant_is_refused() -> None:
    figures = {"Q4_0": 1.0}
    with pytest.raises(ValueError, match="no throughput for F16"):
        dataclasses.replace(LAPTOP_8GB, gpu_tflops=figures)


def test_an_unknown_machine_is_bad_input_naming_the_known_ones() -> None:
    with pytest.raises(BadInputError, match="laptop-8gb, desktop-16gb, rtx5090-desktop, rtx3060"):
        load_described("cray-1")


# --- the cost model on described machines ---


def step_s(name: str, inventory: ModelInventory, placement: Placement, **step: int) -> float:
    profile = load_described(name)
    threads = step.pop("threads", profile.physical_cores)
    model = CostModel(profile)
    return model.predict_step(inventory, threads=threads, placement=placement, **step).seconds


@pytest.mark.parametrize("name", NAMES)
def test_all_gpu_decodes_faster_than_all_cpu(name: str, inventory: ModelInventory) -> None:
    gpu = step_s(name, inventory, ALL_GPU, n_tokens=1)
    assert gpu < step_s(name, inventory, ALL_CPU, n_tokens=1)


@pytest.mark.parametrize("name", NAMES)
def test_streaming_costs_exactly_the_copy_time(name: str, inventory: ModelInventory) -> None:
    streamed = step_s(name, inventory, Placement(default=Where.STREAMED), n_tokens=16)
    resident = step_s(name, inventory, ALL_GPU, n_tokens=16)
    (head,) = [s for s in inventory.globals if s.kind is SubLayerKind.OUTPUT_HEAD]
    copied = sum(b.n_bytes for b in inventory.blocks) + head.n_bytes
    pinned_gbps = load_described(name).gpu.h2d_pinned_gbps
    assert streamed - resident == pytest.approx(copied / (pinned_gbps * 1e9), rel=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_more_cpu_threads_never_slow_a_prompt_step(name: str, inventory: ModelInventory) -> None:
    counts = load_described(name).thread_counts
    times = [step_s(name, inventory, ALL_CPU, n_tokens=256, threads=t) for t in counts]
    assert times == sorted(times, reverse=True)
    assert times[-1] < times[0] / min(4, max(counts) / 2)  # 6 cores: a third


def test_the_5090_decodes_faster_than_the_laptop(inventory: ModelInventory) -> None:
    laptop = step_s("laptop-8gb", inventory, ALL_GPU, n_tokens=1)
    assert step_s("rtx5090-desktop", inventory, ALL_GPU, n_tokens=1) < laptop


def test_gpu_prompt_throughput_grows_laptop_desktop_5090(inventory: ModelInventory) -> None:
    names = ("laptop-8gb", "desktop-16gb", "rtx5090-desktop")
    times = [step_s(name, inventory, ALL_GPU, n_tokens=256) for name in names]
    assert times[0] > times[1] > times[2]


def test_the_shipped_files_name_every_described_machine_and_no_other() -> None:
    """The command line lists them from the files, without importing the table."""
    assert shipped_names() == tuple(sorted(described_names()))
