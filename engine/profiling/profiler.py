"""The install-phase profiler: measure this machine with llama.cpp's own kernels.

It runs a list of steps (fixed costs, one step per quant and block shape,
DRAM bandwidth, weight repacking), each in a child process with a timeout,
reports progress with an ETA, and can be cancelled at any moment. A step that
crashes or hangs is recorded as unusable and the run goes on. A step that
other programs disturbed is measured again, a bounded number of times
(`engine.profiling.machine_load`), and the profile says how busy the machine
was. Only a run that finishes produces a `Profile`; storing it is the
caller's business, so an interrupted run never leaves a partial profile behind.

`fast` is what the first-launch wizard runs (about a minute on 2 cores);
`full` measures more quants, MoE banks for every quant, more thread counts
and repeats each point more often.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from engine.cancel import CancelToken
from engine.child_process import ChildOutcome, run_in_child
from engine.errors import ShardChatError
from engine.machine.hardware import probe_hardware
from engine.machine.hardware_info import HardwareInfo
from engine.machine.profile import (
    GpuProfile,
    KernelPoint,
    MachineLoad,
    Profile,
    ProfileMode,
    RepackResult,
    UnusableConfig,
)
from engine.planning.vram_account import is_software_device, margin_floor_for
from engine.profiling.cpu_steps import (
    measure_attention,
    measure_dram_read_gbps,
    measure_fixed_costs,
    measure_head,
    measure_kernels,
    measure_repack,
)
from engine.profiling.gpu_steps import (
    REAL_GPU_SIZES,
    SOFTWARE_GPU_SIZES,
    measure_cpu_derate_under_copy,
    measure_gpu_attention,
    measure_gpu_fixed_cost,
    measure_gpu_kernels,
    measure_h2d_gbps,
    measure_vram_gbps,
)
from engine.profiling.machine_load import LoadWatch
from engine.profiling.micro_models import DENSE, MOE

log = logging.getLogger(__name__)

TOKEN_COUNTS = (1, 4, 16, 64, 256)
FALLBACK_DRAM_GBPS = 10.0  # used only if the bandwidth step itself failed
AGAIN_SUFFIX = "again (other programs were busy)"  # a repeated step's progress label
GPU_STEP_PREFIXES = ("gpu ", "cpu during copies")  # steps that also need the GPU to themselves


@dataclass(frozen=True)
class ProfilePlan:
    """What one mode measures."""

    mode: ProfileMode
    thread_counts: tuple[int, ...]
    dense_quants: tuple[str, ...]
    moe_quants: tuple[str, ...]
    repeats: int = 3
    token_counts: tuple[int, ...] = TOKEN_COUNTS
    contexts: tuple[int, ...] = (0, 512, 2048)
    step_timeout_s: float = 120.0
    # steps measured again because other programs disturbed them, at most, in the whole run:
    # a machine that stays busy costs a few steps more, not three times the run
    disturbed_repeats: int = 4


def plan_for(mode: ProfileMode, physical_cores: int) -> ProfilePlan:
    """Fast: the quants that matter most, 1 and all cores. Full: more of everything."""
    if mode is ProfileMode.SMOKE:
        return ProfilePlan(
            mode, (physical_cores,), ("Q4_0",), (), repeats=1, token_counts=(1, 16),
            contexts=(0, 256), disturbed_repeats=1,
        )  # fmt: skip
    if mode is ProfileMode.FAST:
        threads = tuple(sorted({1, max(1, physical_cores // 2), physical_cores}))
        return ProfilePlan(mode, threads, ("F16", "Q8_0", "Q4_0", "Q4_1", "Q4_K"), ("Q4_0",))
    quants = ("F16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K")
    return ProfilePlan(
        mode,
        thread_ladder(physical_cores),
        quants,
        quants,
        repeats=5,
        contexts=(0, 512, 2048, 8192),
        disturbed_repeats=8,
    )


# A software GPU (lavapipe) runs at about 1-2 GFLOPS: the quants and contexts the
# cost model needs most, with the smaller step sizes of engine.profiling.gpu_steps.
SOFTWARE_GPU_DENSE_QUANTS = ("Q8_0", "Q4_0")
SOFTWARE_GPU_MOE_QUANTS = ("Q4_0",)
SOFTWARE_GPU_MAX_CONTEXT = 512


def _software_quants(planned: tuple[str, ...], wanted: tuple[str, ...]) -> tuple[str, ...]:
    """The wanted quants the plan measures; the plan's first if it has none of them."""
    chosen = tuple(q for q in wanted if q in planned)
    return chosen or planned[:1]


def thread_ladder(physical_cores: int) -> tuple[int, ...]:
    """1 .. physical cores: every count on small machines, powers of two and the top on big ones."""
    if physical_cores <= 8:
        return tuple(range(1, physical_cores + 1))
    ladder = {1 << i for i in range(physical_cores.bit_length()) if 1 << i <= physical_cores}
    return tuple(sorted(ladder | {physical_cores, physical_cores * 3 // 4}))


@dataclass(frozen=True)
class ProfileProgress:
    step: int  # steps finished
    total: int
    label: str  # what runs next (or "done")
    elapsed_s: float
    eta_s: float | None


ProgressCallback = Callable[[ProfileProgress], None]


@dataclass(frozen=True)
class _Step:
    label: str
    function: Callable[..., Any]
    args: tuple[Any, ...]
    weight: float  # expected share of the run's time, for the ETA


class Profiler:
    """Runs a plan's steps in child processes and assembles the profile."""

    def __init__(
        self,
        mode: ProfileMode = ProfileMode.FAST,
        hardware: HardwareInfo | None = None,
        progress: ProgressCallback | None = None,
        cancel: CancelToken | None = None,
        plan: ProfilePlan | None = None,
    ) -> None:
        self.hardware = hardware or probe_hardware()
        self.plan = plan or plan_for(mode, self.hardware.cpu.physical_cores)
        self._progress = progress or (lambda _p: None)
        self._cancel = cancel or CancelToken()

    def run(self) -> Profile:
        """Measure everything in the plan; raises Cancelled if cancelled. Never partial."""
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="shardchat-profile-") as folder:
            results, unusable, load = self._run_steps(self._steps(folder), started)
        return self._assemble(results, unusable, load, time.monotonic() - started)

    def _steps(self, folder: str) -> list[_Step]:
        plan = self.plan
        top = max(plan.thread_counts)
        kernel_args = (plan.thread_counts, plan.token_counts, plan.repeats)
        fixed_args = (folder, plan.thread_counts, plan.repeats)
        steps = [_Step("fixed costs", measure_fixed_costs, fixed_args, 0.3)]
        for quant in plan.dense_quants:
            args = (folder, DENSE, quant, *kernel_args)
            steps.append(_Step(f"dense {quant}", measure_kernels, args, 1.0))
        for quant in plan.moe_quants:
            args = (folder, MOE, quant, *kernel_args)
            steps.append(_Step(f"moe {quant}", measure_kernels, args, 0.8))
        head_tokens = tuple(n for n in (1, 4, 16, 64) if n <= max(plan.token_counts))
        head_args = (folder, plan.thread_counts, head_tokens, plan.repeats)
        steps.append(_Step("head", measure_head, head_args, 0.4))
        attention_args = (folder, top, plan.contexts, (1, 16), plan.repeats)
        steps.append(_Step("attention", measure_attention, attention_args, 0.4))
        dram_args = (folder, top, plan.repeats)
        steps.append(_Step("dram bandwidth", measure_dram_read_gbps, dram_args, 0.3))
        repack_args = (folder, DENSE, top, plan.repeats)
        steps.append(_Step("repack", measure_repack, repack_args, 0.3))
        if self.hardware.gpus:
            steps += self._gpu_steps(folder, top)
        return steps

    def _gpu_steps(self, folder: str, top: int) -> list[_Step]:
        plan, sizes = self.plan, REAL_GPU_SIZES
        dense_quants, moe_quants, contexts = plan.dense_quants, plan.moe_quants, plan.contexts
        software = is_software_device(self.hardware.gpus[0].name)
        if software:
            sizes = SOFTWARE_GPU_SIZES
        counts = tuple(n for n in plan.token_counts if n <= max(sizes.token_counts))
        sizes = dataclasses.replace(sizes, token_counts=counts or sizes.token_counts)
        if software:
            dense_quants = _software_quants(dense_quants, SOFTWARE_GPU_DENSE_QUANTS)
            moe_quants = _software_quants(moe_quants, SOFTWARE_GPU_MOE_QUANTS)
            contexts = tuple(c for c in contexts if c <= SOFTWARE_GPU_MAX_CONTEXT)
        repeats = plan.repeats
        steps = [_Step("gpu fixed costs", measure_gpu_fixed_cost, (folder, repeats, sizes), 0.2)]
        for quant in dense_quants:
            args = (folder, DENSE, quant, repeats, sizes)
            steps.append(_Step(f"gpu dense {quant}", measure_gpu_kernels, args, 0.3))
        for quant in moe_quants:
            args = (folder, MOE, quant, repeats, sizes)
            steps.append(_Step(f"gpu moe {quant}", measure_gpu_kernels, args, 0.3))
        attention_args = (folder, contexts, (1, 16), repeats, sizes)
        copies_args = (folder, top, repeats, sizes)
        return steps + [
            _Step("gpu attention", measure_gpu_attention, attention_args, 0.3),
            _Step("gpu vram bandwidth", measure_vram_gbps, (folder, repeats, sizes), 0.2),
            _Step("gpu host-to-device", measure_h2d_gbps, copies_args, 0.5),
            _Step("cpu during copies", measure_cpu_derate_under_copy, copies_args, 0.5),
        ]

    def _run_steps(
        self, steps: list[_Step], started: float
    ) -> tuple[dict[str, Any], list[UnusableConfig], MachineLoad]:
        results: dict[str, Any] = {}
        unusable: list[UnusableConfig] = []
        total_weight = sum(s.weight for s in steps)
        done_weight = 0.0
        watch = LoadWatch(max_repeats=self.plan.disturbed_repeats)
        try:
            for index, step in enumerate(steps):
                share = done_weight / total_weight
                self._report(index, len(steps), step.label, started, share)
                outcome = self._run_watched(watch, step, index, len(steps), started, share)
                self._record(step, outcome, results, unusable)
                done_weight += step.weight
        finally:
            watch.close()
        self._report(len(steps), len(steps), "done", started, 1.0)
        return results, unusable, watch.verdict()

    def _run_watched(
        self, watch: LoadWatch, step: _Step, index: int, total: int, started: float, share: float
    ) -> ChildOutcome:
        """The step in a child, measured again while other programs disturb it (bounded)."""

        def again(label: str) -> None:
            self._report(index, total, f"{label} {AGAIN_SUFFIX}", started, share)

        watched = watch.run(
            step.label,
            lambda: run_in_child(step.function, step.args, self.plan.step_timeout_s, self._cancel),
            usable=lambda outcome: outcome.ok,
            uses_gpu=step.label.startswith(GPU_STEP_PREFIXES),
            again=again,
        )
        return watched.value

    @staticmethod
    def _record(
        step: _Step, outcome: ChildOutcome, results: dict[str, Any], unusable: list[UnusableConfig]
    ) -> None:
        if outcome.ok:
            results[step.label] = outcome.value
        else:
            log.warning("profiling step %s unusable: %s", step.label, outcome.failure)
            unusable.append(UnusableConfig(step.label, outcome.failure or "failed"))

    def _report(self, step: int, total: int, label: str, started: float, share: float) -> None:
        elapsed = time.monotonic() - started
        eta = elapsed / share * (1 - share) if share > 0 else None
        self._progress(ProfileProgress(step, total, label, elapsed, eta))

    def _assemble(
        self,
        results: dict[str, Any],
        unusable: list[UnusableConfig],
        load: MachineLoad,
        duration_s: float,
    ) -> Profile:
        kernels: list[KernelPoint] = []
        for label, value in results.items():
            if label.startswith(("dense ", "moe ", "head")):
                kernels.extend(value)
        gpu = self._gpu_profile(results)
        if not kernels:
            reasons = "; ".join(f"{u.config}: {u.reason}" for u in unusable)
            raise ShardChatError(f"profiling failed: no kernel could be measured ({reasons})")
        call, layer = results.get("fixed costs", ({}, {}))
        return Profile(
            fingerprint=self.hardware.fingerprint(),
            llama_build=self.hardware.llama_build,
            mode=self.plan.mode,
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            duration_s=duration_s,
            physical_cores=self.hardware.cpu.physical_cores,
            cpu_kernels=tuple(kernels),
            cpu_call_overhead_s=call,
            cpu_layer_overhead_s=layer,
            dram_read_gbps=results.get("dram bandwidth", FALLBACK_DRAM_GBPS),
            repack=results.get("repack") or _repack_failed(unusable),
            cpu_attention=results.get("attention", ()),
            gpu=gpu,
            hardware=self.hardware.to_dict(),
            unusable=tuple(unusable),
            machine_load=load,
        )

    def _gpu_profile(self, results: dict[str, Any]) -> GpuProfile | None:
        """The GPU part, if its kernels and its link could be measured."""
        kernels = [
            point for label, value in results.items()
            if label.startswith(("gpu dense ", "gpu moe ")) for point in value
        ]  # fmt: skip
        link = results.get("gpu host-to-device")
        if not self.hardware.gpus or not kernels or link is None:
            return None
        device = self.hardware.gpus[0]
        call, layer = results.get("gpu fixed costs", (0.0, 0.0))
        return GpuProfile(
            name=device.name,
            vram_total_bytes=device.vram_total_bytes,
            kernels=tuple(kernels),
            h2d_pinned_gbps=link[0],
            h2d_pageable_gbps=link[1],
            cpu_derate_under_copy=results.get("cpu during copies", 1.0),
            step_overhead_s=call,
            memory_gbps=results.get("gpu vram bandwidth", link[0]),
            attention=results.get("gpu attention", ()),
            backend=device.backend,
            ggml_device=device.ggml_device,
            margin_floor_bytes=margin_floor_for(device.name),
            layer_overhead_s=layer,
        )


def _repack_failed(unusable: list[UnusableConfig]) -> RepackResult:
    reason = next((u.reason for u in unusable if u.config == "repack"), "not measured")
    return RepackResult(works=False, speedup=None, detail=reason)
