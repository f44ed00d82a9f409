"""Profiles in words: the wizard's rows for a GPU machine (described) and for this GPU-less one.

A GPU only ggml sees (a Vulkan device: AMD, Intel, lavapipe) is described as the
probe would report it, since these machines have none the CPU build can see.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.screen_text.profile_summary import (
    backend_text,
    budget_text,
    gpu_rows,
    hardware_rows,
    pcie_text,
    render_profile,
    result_rows,
    suggested_budget_bytes,
    time_left_text,
)
from app.screen_text.units import format_duration
from engine.machine.calibration import kind_error
from engine.machine.described_machines import load_described
from engine.machine.gpu_probe import NO_GPU_FOUND
from engine.machine.hardware import probe_hardware
from engine.machine.hardware_info import GpuInfo, HardwareInfo
from engine.machine.profile import Profile, StepLoad
from engine.profiling.machine_load import machine_load


@pytest.fixture(scope="module")
def rtx5090() -> Profile:
    return load_described("rtx5090-desktop")


def test_a_gpu_machine_shows_its_link_measured_copies_and_budget(rtx5090) -> None:
    hardware = HardwareInfo.from_dict(rtx5090.hardware)
    budget = suggested_budget_bytes(hardware)
    assert budget == 32 * 1024**3 - 512 * 1024**2  # all 32 GiB free, minus the reserve
    rows = dict(result_rows(rtx5090, budget))
    assert rows["GPU 0"] == "NVIDIA GeForce RTX 5090 — CUDA, 32.0 GiB VRAM (0 B used by others)"
    assert rows["PCIe (GPU 0)"] == "gen 5, x16"
    gpu = rtx5090.gpu
    assert rows["Host→device"] == (
        f"{gpu.h2d_pinned_gbps:.1f} GB/s pinned, {gpu.h2d_pageable_gbps:.1f} GB/s pageable"
    )
    assert rows["Suggested VRAM budget"].startswith("31.5 GiB")
    assert rows["DRAM read"] == f"{rtx5090.dram_read_gbps:.1f} GB/s"
    assert rows["Measured in"].startswith("not measured")
    error = kind_error("CUDA")  # how sure: the calibration table's CUDA rows (issue 29)
    assert rows["Predictions"].startswith(f"±{error:.0%}: how far predictions for CUDA machines")


def test_a_pcie_link_below_its_best_says_both() -> None:
    gpu = HardwareInfo.from_dict(load_described("laptop-8gb").hardware).gpus[0]
    idle = replace(
        gpu,
        pcie_generation_current=1,
        pcie_generation_max=4,
        pcie_width_current=4,
        pcie_width_max=8,
    )
    assert pcie_text(idle) == "gen 1 (up to gen 4), x4 (up to x8)"
    unknown = replace(idle, pcie_generation_current=None, pcie_generation_max=None)
    assert pcie_text(unknown) == "gen ?, x4 (up to x8)"


def test_this_machine_has_no_gpu_and_a_cpu_plan() -> None:
    hardware = probe_hardware()
    rows = dict(hardware_rows(hardware))
    assert rows["GPU"] == hardware.gpu_reason and rows["GPU"].startswith(NO_GPU_FOUND)
    assert hardware.cpu.model in rows["CPU"] and rows["llama.cpp"] == hardware.llama_build
    assert rows["CPU variant"]  # the CPU module chosen for this CPU
    assert rows["Backend libggml-vulkan.so"].startswith("loaded (no Vulkan GPU")
    assert not [name for name in rows if name.startswith("Backend libggml-cpu-")]
    assert suggested_budget_bytes(hardware) == 0
    assert "CPU plan" in budget_text(0)


def test_a_recorded_measured_profile_lists_threads_and_the_fastest(recorded_profile) -> None:
    profile = recorded_profile
    rows = dict(result_rows(profile, 0))
    assert rows["Threads"].startswith("measured 1, 2; fastest with ")
    reason = profile.hardware["gpu_reason"]  # stored before ggml was asked too
    assert rows["GPU"] == f"no GPU found ({reason})"
    assert rows["Measured in"] == format_duration(profile.duration_s) == "43 s"
    text = render_profile(profile)
    assert f"DRAM read      {profile.dram_read_gbps:.1f} GB/s" in text


def test_how_busy_the_machine_was_is_said_only_as_far_as_it_is_known(
    rtx5090, recorded_profile
) -> None:
    older = recorded_profile
    assert "machine load   not recorded" in render_profile(older)
    assert "Machine while measured" not in dict(result_rows(older, 0))
    assert "machine load   described, not measured" in render_profile(rtx5090)
    steps = [(StepLoad("fixed costs", 0.04, 1), 2.0), (StepLoad("dense Q4_0", 0.06, 1), 8.0)]
    quiet = replace(older, machine_load=machine_load(steps, steps_repeated=0))
    assert dict(result_rows(quiet, 0))["Machine while measured"] == (
        "quiet (other programs used 6% of the processor)"
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.4, "1 s"), (45, "45 s"), (83, "1 min 23 s"), (600, "10 min 00 s"), (4000, "1 h 06 min")],
)
def test_durations_read_naturally(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("eta", "text"),
    [
        (None, "estimating the time left…"),
        (3, "a few seconds left"),
        (23, "about 25 s left"),
        (61, "about 60 s left"),
        (200, "about 3 min left"),
    ],
)
def test_time_left_is_rounded_not_pretend_exact(eta: float | None, text: str) -> None:
    assert time_left_text(eta) == text


def lavapipe(**changes: object) -> GpuInfo:
    """Mesa's software Vulkan GPU as engine.machine.hardware reports it (ggml's figures only)."""
    gpu = GpuInfo(
        index=0,
        name="llvmpipe (LLVM 15.0.6, 256 bits)",
        uuid="",
        vram_total_bytes=2 * 1024**3,
        vram_free_bytes=2 * 1024**3,
        vram_used_bytes=0,
        other_processes_bytes=0,
        pcie_generation_current=None,
        pcie_generation_max=None,
        pcie_width_current=None,
        pcie_width_max=None,
        compute_capability=None,
        backend="Vulkan",
        ggml_device="Vulkan0",
        other_processes_known=False,
    )
    return replace(gpu, **changes)


def test_a_vulkan_gpu_names_its_backend_and_device_and_has_no_pcie_row() -> None:
    hardware = replace(probe_hardware(), gpus=(lavapipe(),), gpu_reason=None)
    rows = dict(gpu_rows(hardware))
    assert rows["GPU 0"] == "llvmpipe (LLVM 15.0.6, 256 bits) — Vulkan (Vulkan0), 2.0 GiB VRAM"
    assert "PCIe (GPU 0)" not in rows


def test_an_integrated_gpu_says_its_memory_is_system_ram() -> None:
    iris = lavapipe(name="Intel(R) Iris(R) Xe Graphics", vram_total_bytes=16 * 1024**3)
    hardware = replace(probe_hardware(), gpus=(replace(iris, integrated=True),))
    assert dict(gpu_rows(hardware))["GPU 0"] == (
        "Intel(R) Iris(R) Xe Graphics — Vulkan (Vulkan0), 16.0 GiB of system RAM (integrated GPU)"
    )


def test_the_cli_summary_names_the_backend_the_gpu_was_profiled_on(rtx5090) -> None:
    assert "GPU            NVIDIA GeForce RTX 5090 — CUDA, 32.0 GiB" in render_profile(rtx5090)
    on_vulkan = replace(rtx5090, gpu=replace(rtx5090.gpu, backend="Vulkan", ggml_device="Vulkan0"))
    assert "NVIDIA GeForce RTX 5090 — Vulkan (Vulkan0), 32.0 GiB" in render_profile(on_vulkan)
    assert backend_text("Metal", "MTL0") == "Metal (MTL0)" and backend_text("CUDA", None) == "CUDA"
