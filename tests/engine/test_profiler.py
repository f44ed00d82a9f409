"""A real profiling run (the smoke plan: seconds, not a minute): progress, cancel, failures."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from engine.cancel import CancelToken
from engine.child_process import Cancelled
from engine.machine.hardware import probe_hardware
from engine.machine.hardware_info import GpuInfo
from engine.machine.profile import Device, KernelShape, Profile, ProfileMode
from engine.profiling.profiler import ProfileProgress, Profiler, plan_for, thread_ladder

pytestmark = pytest.mark.serial  # it measures this machine: see the marker


@pytest.fixture(scope="module")
def hardware():
    return probe_hardware()


@pytest.fixture(scope="module")
def smoke_run(hardware):
    seen: list[ProfileProgress] = []
    profile = Profiler(ProfileMode.SMOKE, hardware=hardware, progress=seen.append).run()
    return profile, seen


def test_smoke_run_measures_every_part(smoke_run, hardware) -> None:
    profile, _ = smoke_run
    assert profile.mode is ProfileMode.SMOKE
    assert profile.fingerprint == hardware.fingerprint()
    assert profile.unusable == ()
    shapes = {k.shape for k in profile.cpu_kernels}
    assert shapes == {KernelShape.DENSE, KernelShape.HEAD}
    assert all(k.device is Device.CPU and k.seconds_per_layer > 0 for k in profile.cpu_kernels)
    assert all(k.gflops > 0.1 for k in profile.cpu_kernels)
    assert profile.dram_read_gbps > 0.5
    assert profile.repack is not None and profile.repack.works
    assert profile.cpu_attention and profile.cpu_call_overhead_s and profile.cpu_layer_overhead_s
    load = profile.machine_load  # every step's load, whatever this machine's verdict
    assert load is not None
    assert [s.step for s in load.steps] == [
        "fixed costs", "dense Q4_0", "head", "attention", "dram bandwidth", "repack",
    ]  # fmt: skip
    assert len(profile.to_json().encode()) < 200 * 1024
    assert Profile.from_json(profile.to_json()) == profile


def test_more_tokens_per_step_raise_throughput(smoke_run) -> None:
    profile, _ = smoke_run
    dense = {k.n_tokens: k for k in profile.cpu_kernels if k.shape is KernelShape.DENSE}
    assert dense[16].gflops > dense[1].gflops
    assert dense[16].seconds_per_layer > dense[1].seconds_per_layer


def test_progress_counts_up_to_done_with_an_eta(smoke_run) -> None:
    _, seen = smoke_run
    steps = [p.step for p in seen]
    assert steps == sorted(steps) and steps[0] == 0
    assert seen[-1].label == "done" and seen[-1].step == seen[-1].total
    # an estimate once a step is done; a first step measured again (the machine was busy)
    # has nothing done to estimate from yet
    assert all(p.eta_s is not None for p in seen if p.step >= 1)


def test_a_configuration_that_fails_is_recorded_and_the_run_goes_on(hardware) -> None:
    plan = replace(plan_for(ProfileMode.SMOKE, 1), dense_quants=("Q4_0", "Q9_9"))
    profile = Profiler(hardware=hardware, plan=plan).run()
    assert [u.config for u in profile.unusable] == ["dense Q9_9"]
    assert "Q9_9" in profile.unusable[0].reason
    assert {k.quant for k in profile.cpu_kernels if k.shape is KernelShape.DENSE} == {"Q4_0"}


def test_cancel_stops_the_run_without_a_profile(hardware) -> None:
    cancel = CancelToken()
    labels: list[str] = []

    def cancel_on_second_step(progress: ProfileProgress) -> None:
        labels.append(progress.label)
        if progress.step == 1:
            threading.Timer(0.2, cancel.cancel).start()

    profiler = Profiler(
        ProfileMode.SMOKE, hardware=hardware, progress=cancel_on_second_step, cancel=cancel
    )
    with pytest.raises(Cancelled):
        profiler.run()
    assert "done" not in labels


def test_plans_grow_from_smoke_to_full() -> None:
    smoke, fast, full = (
        plan_for(m, 16) for m in (ProfileMode.SMOKE, ProfileMode.FAST, ProfileMode.FULL)
    )
    assert set(fast.dense_quants) >= {"F16", "Q8_0", "Q4_0", "Q4_K"}
    assert fast.token_counts == (1, 4, 16, 64, 256)
    assert set(full.dense_quants) > set(fast.dense_quants) > set(smoke.dense_quants)
    assert full.thread_counts == thread_ladder(16) == (1, 2, 4, 8, 12, 16)
    assert fast.thread_counts == (1, 8, 16)
    assert thread_ladder(6) == (1, 2, 3, 4, 5, 6)


def test_a_machine_with_a_gpu_gets_gpu_steps_and_a_cpu_build_records_them_unusable(
    hardware,
) -> None:
    """llama.cpp finds no GPU on this machine: GPU steps must refuse, not measure the CPU."""
    laptop_gpu = GpuInfo(
        index=0, name="NVIDIA GeForce RTX 4060 Laptop GPU", uuid="GPU-described",
        vram_total_bytes=8 << 30, vram_free_bytes=7 << 30, vram_used_bytes=1 << 30,
        other_processes_bytes=0, pcie_generation_current=4, pcie_generation_max=4,
        pcie_width_current=8, pcie_width_max=8, compute_capability=(8, 9),
    )  # fmt: skip
    with_gpu = replace(hardware, gpus=(laptop_gpu,), gpu_reason=None)
    plan = replace(plan_for(ProfileMode.SMOKE, 1), dense_quants=("Q4_0",), moe_quants=())
    labels: list[str] = []
    profile = Profiler(
        hardware=with_gpu, plan=plan, progress=lambda p: labels.append(p.label)
    ).run()
    gpu_steps = [label for label in labels if label.startswith("gpu ")]
    assert gpu_steps == [
        "gpu fixed costs", "gpu dense Q4_0", "gpu attention", "gpu vram bandwidth",
        "gpu host-to-device",
    ]  # fmt: skip
    assert profile.gpu is None
    reasons = {u.config: u.reason for u in profile.unusable}
    assert set(reasons) == {*gpu_steps, "cpu during copies"}
    assert all("no GPU device here" in reason for reason in reasons.values())
    assert profile.cpu_kernels  # the CPU part is whole
