"""Profiles in words: the wizard's rows for a GPU machine (described) and for this GPU-less one."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.profile_summary import (
    budget_text,
    format_duration,
    hardware_rows,
    pcie_text,
    render_profile,
    result_rows,
    suggested_budget_bytes,
    time_left_text,
)
from engine.described_machines import load_described
from engine.hardware import HardwareInfo, probe_hardware
from engine.profile import Profile

RECORDED = Path(__file__).resolve().parents[1] / "data" / "profile-epyc-2core-fast.json"


@pytest.fixture(scope="module")
def rtx5090() -> Profile:
    return load_described("rtx5090-desktop")


def test_a_gpu_machine_shows_its_link_measured_copies_and_budget(rtx5090) -> None:
    hardware = HardwareInfo.from_dict(rtx5090.hardware)
    budget = suggested_budget_bytes(hardware)
    assert budget == 32 * 1024**3 - 512 * 1024**2  # all 32 GiB free, minus the reserve
    rows = dict(result_rows(rtx5090, budget))
    assert rows["GPU 0"].startswith("NVIDIA GeForce RTX 5090, 32.0 GiB VRAM")
    assert rows["PCIe (GPU 0)"] == "gen 5, x16"
    gpu = rtx5090.gpu
    assert rows["Host→device"] == (
        f"{gpu.h2d_pinned_gbps:.1f} GB/s pinned, {gpu.h2d_pageable_gbps:.1f} GB/s pageable"
    )
    assert rows["Suggested VRAM budget"].startswith("31.5 GiB")
    assert rows["DRAM read"] == f"{rtx5090.dram_read_gbps:.1f} GB/s"
    assert rows["Measured in"].startswith("not measured")


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
    assert rows["GPU"] == f"no NVIDIA GPU found ({hardware.gpu_reason})"
    assert hardware.cpu.model in rows["CPU"] and rows["llama.cpp"] == hardware.llama_build
    assert suggested_budget_bytes(hardware) == 0
    assert "CPU plan" in budget_text(0)


def test_a_recorded_measured_profile_lists_threads_and_the_fastest() -> None:
    profile = Profile.from_dict(json.loads(RECORDED.read_text()))
    rows = dict(result_rows(profile, 0))
    assert rows["Threads"].startswith("measured 1, 2; fastest with ")
    assert rows["GPU"].startswith("no NVIDIA GPU found")
    assert rows["Measured in"] == format_duration(profile.duration_s) == "43 s"
    text = render_profile(profile)
    assert f"DRAM read      {profile.dram_read_gbps:.1f} GB/s" in text


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0 s"), (45, "45 s"), (83, "1 min 23 s"), (600, "10 min 00 s")]
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
