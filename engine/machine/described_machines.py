"""Described profiles: machines we do not have, derived from their datasheets.

The planner and the cost model work from a measured profile, but the machines
ShardChat is meant for (an 8 GB gaming laptop, a 16 GB desktop, an RTX 5090
desktop, an RTX 3060 or 4090, a Radeon RX 7900 XTX or an Intel Arc under Vulkan)
are not the ones we develop on. The machines of the calibration table's rows
(engine.machine.calibration) are described the same way, so the cost model can
be checked against what was published for them. To inspect and test plans for them we
*describe* them: take the figures a datasheet gives (cores, memory speed,
VRAM bandwidth, PCIe link) plus a few stated efficiency assumptions, and turn
them into the same Profile a measurement would give, by roofline.

A described profile is marked `ProfileMode.DESCRIBED` and says in its
`description` which figures and assumptions made it. Described is not
measured: it shows what the planner would do if the machine behaved like its
datasheet, not what it does.

Each kernel point is a roofline over a representative 4096-wide block (a
Llama-3-8B-like dense block, a Mixtral-like expert block, a 128256-row output
head): seconds = max(weight bytes read / bandwidth(threads), FLOPs /
throughput(threads, n_tokens)), where one thread gets a share of the DRAM
bandwidth that grows with threads, and a step of n tokens reaches
n / (n + k) of the large-batch throughput. CPU points also carry the fixed
per-block cost a measurement would include, and GPU points the per-block launch
cost; the fixed cost of each routed expert (engine.machine.datasheets) goes into
the profile's expert_overhead_s. The profiles ship as JSON in engine/machine/described/;
`python -m engine.machine.described_machines` regenerates them after a change here.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from engine.errors import BadInputError
from engine.machine.datasheets import (
    CPU_GFLOPS_SOURCE,
    CPU_HALF_BATCH_TOKENS,
    DESCRIBED_MACHINES,
    GPU_TFLOPS_SOURCE,
    QUANT_BITS,
    QUANTS,
    MachineDatasheet,
)
from engine.machine.hardware_info import CpuInfo, GpuInfo, HardwareInfo, MemoryInfo
from engine.machine.profile import (
    AttentionPoint,
    Device,
    GpuProfile,
    KernelPoint,
    KernelShape,
    Profile,
    ProfileMode,
)

logger = logging.getLogger(__name__)

GIB = 1024**3
CREATED_AT = "2026-11-29T00:00:00+00:00"  # fixed, so regenerated files are byte-identical
LLAMA_BUILD = "described"
TOKEN_COUNTS = (1, 4, 16, 64, 256)
ATTENTION_CONTEXTS = (512, 2048, 8192)
ATTENTION_TOKENS = (1, 16)
GPU_THREADS = 1  # GPU kernel points do not depend on CPU threads; the cost model takes any
SIGNIFICANT_DIGITS = 5  # described figures are not that precise; shorter files

# ------------------------------------------------------------------- reference blocks


@dataclass(frozen=True)
class ReferenceBlock:
    """The block a described kernel point stands for: its weights and what a token uses."""

    shape: KernelShape
    shared_params: int  # weights every token reads: attention, router, dense FFN, head
    expert_params: int = 0  # the routed expert bank
    expert_share: float = 1.0  # share of the bank one token uses

    def bytes_held(self, quant: str) -> int:
        return int((self.shared_params + self.expert_params) * QUANT_BITS[quant] / 8)

    def bytes_touched(self, quant: str, n_tokens: int) -> float:
        """Weight bytes one step reads: experts only as far as n_tokens random tokens reach."""
        touched = 1.0 - (1.0 - self.expert_share) ** n_tokens
        return (self.shared_params + self.expert_params * touched) * QUANT_BITS[quant] / 8

    def flops(self, n_tokens: int) -> float:
        active = self.shared_params + self.expert_params * self.expert_share
        return 2.0 * active * n_tokens


WIDTH, FFN_WIDTH, VOCAB = 4096, 14336, 128256  # Llama-3-8B and Mixtral-8x7B widths
ATTENTION_PARAMS = 4 * WIDTH * WIDTH
REFERENCE_BLOCKS = (
    ReferenceBlock(KernelShape.DENSE, ATTENTION_PARAMS + 3 * WIDTH * FFN_WIDTH),
    ReferenceBlock(  # 8 experts, 2 used, plus the router
        KernelShape.MOE, ATTENTION_PARAMS + 8 * WIDTH, 8 * 3 * WIDTH * FFN_WIDTH, 2 / 8
    ),
    ReferenceBlock(KernelShape.HEAD, WIDTH * VOCAB),
)
# Attention points: Llama-3-8B-like heads, F16 KV cache.
N_HEAD, N_HEAD_KV, HEAD_DIM, KV_BYTES_PER_ELEMENT = 32, 8, 128, 2


# ------------------------------------------------------------------------- roofline


def saturation(n_tokens: int, half_tokens: float) -> float:
    """Share of large-batch throughput a step of n_tokens reaches."""
    return n_tokens / (n_tokens + half_tokens)


def cpu_bandwidth_gbps(sheet: MachineDatasheet, threads: int) -> float:
    reached = sheet.dram_gbps * sheet.dram_efficiency
    return reached * (1.0 - (1.0 - sheet.single_thread_dram_share) ** threads)


def _shape_share(sheet: MachineDatasheet, shape: KernelShape) -> float:
    return sheet.moe_compute_share if shape is KernelShape.MOE else 1.0


def cpu_gflops(
    sheet: MachineDatasheet, shape: KernelShape, quant: str, threads: int, n_tokens: int
) -> float:
    """Compute throughput of `threads` cores on an n_tokens step."""
    cores = 1.0 + (threads - 1) * sheet.parallel_efficiency
    per_core = sheet.cpu_gflops_per_core[quant] * _shape_share(sheet, shape)
    return per_core * cores * _cpu_batch_share(sheet, quant, n_tokens)


def _cpu_batch_share(sheet: MachineDatasheet, quant: str, n_tokens: int) -> float:
    """One token takes the vec-dot path; batches take the matrix kernels, which need tokens."""
    share = saturation(n_tokens, CPU_HALF_BATCH_TOKENS.get(quant, 1.0))
    return max(share, sheet.cpu_single_token_share) if n_tokens == 1 else share


def gpu_gflops(sheet: MachineDatasheet, shape: KernelShape, quant: str, n_tokens: int) -> float:
    peak = sheet.gpu_tflops[quant] * 1e3 * _shape_share(sheet, shape)
    share = saturation(n_tokens, sheet.gpu_half_batch_tokens)
    return peak * max(share, sheet.gpu_small_batch_share)


def _with_doublings(base_s: float, per_doubling_s: float, threads: int) -> float:
    return base_s + per_doubling_s * math.log2(threads)


def call_overhead_s(sheet: MachineDatasheet, threads: int) -> float:
    return _with_doublings(
        sheet.cpu_call_overhead_s, sheet.cpu_call_overhead_per_doubling_s, threads
    )


def block_overhead_s(sheet: MachineDatasheet, threads: int) -> float:
    return _with_doublings(
        sheet.cpu_block_overhead_s, sheet.cpu_block_overhead_per_doubling_s, threads
    )


def _rounded(value: float) -> float:
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def _kernel_point(
    device: Device, block: ReferenceBlock, quant: str, threads: int, n_tokens: int, seconds: float
) -> KernelPoint:
    return KernelPoint(
        device=device,
        shape=block.shape,
        quant=quant,
        threads=threads,
        n_tokens=n_tokens,
        seconds_per_layer=_rounded(seconds),
        flops_per_layer=block.flops(n_tokens),
        bytes_per_layer=block.bytes_held(quant),
    )


def cpu_kernel_point(
    sheet: MachineDatasheet, block: ReferenceBlock, quant: str, threads: int, n_tokens: int
) -> KernelPoint:
    """max(bytes / bandwidth, FLOPs / throughput), plus the fixed per-block cost a
    measurement includes (the cost model takes it off again)."""
    memory_s = block.bytes_touched(quant, n_tokens) / (cpu_bandwidth_gbps(sheet, threads) * 1e9)
    gflops = cpu_gflops(sheet, block.shape, quant, threads, n_tokens)
    compute_s = block.flops(n_tokens) / (gflops * 1e9)
    seconds = max(memory_s, compute_s) + block_overhead_s(sheet, threads)
    return _kernel_point(Device.CPU, block, quant, threads, n_tokens, seconds)


def gpu_kernel_point(
    sheet: MachineDatasheet, block: ReferenceBlock, quant: str, n_tokens: int
) -> KernelPoint:
    """max(bytes / bandwidth, FLOPs / throughput), plus the fixed per-block launch cost a
    measurement includes (the cost model takes it off again)."""
    memory_s = block.bytes_touched(quant, n_tokens) / (gpu_memory_gbps(sheet) * 1e9)
    compute_s = block.flops(n_tokens) / (gpu_gflops(sheet, block.shape, quant, n_tokens) * 1e9)
    seconds = max(memory_s, compute_s) + sheet.gpu_layer_overhead_s
    return _kernel_point(Device.GPU, block, quant, GPU_THREADS, n_tokens, seconds)


def cpu_kernel_points(sheet: MachineDatasheet) -> tuple[KernelPoint, ...]:
    return tuple(
        cpu_kernel_point(sheet, block, quant, threads, n_tokens)
        for block in REFERENCE_BLOCKS
        for quant in QUANTS
        for threads in sheet.thread_counts
        for n_tokens in TOKEN_COUNTS
    )


def gpu_kernel_points(sheet: MachineDatasheet) -> tuple[KernelPoint, ...]:
    return tuple(
        gpu_kernel_point(sheet, block, quant, n_tokens)
        for block in REFERENCE_BLOCKS
        for quant in QUANTS
        for n_tokens in TOKEN_COUNTS
    )


def attention_seconds(
    n_ctx: int, n_tokens: int, gbps: float, gflops: float, floor_s: float
) -> float:
    """One block's attention over n_ctx cached tokens: read the KV cache or compute, whichever
    is slower, plus a fixed cost per query head."""
    kv_bytes = n_ctx * N_HEAD_KV * HEAD_DIM * 2 * KV_BYTES_PER_ELEMENT  # K and V
    flops = 4.0 * HEAD_DIM * N_HEAD * n_ctx * n_tokens  # Q.K and P.V
    return max(kv_bytes / (gbps * 1e9), flops / (gflops * 1e9)) + N_HEAD * floor_s


def _attention_points(
    device: Device, gbps: float, gflops: float, floor_s: float
) -> tuple[AttentionPoint, ...]:
    return tuple(
        AttentionPoint(
            device=device,
            n_ctx=n_ctx,
            n_tokens=n_tokens,
            seconds_per_layer=_rounded(attention_seconds(n_ctx, n_tokens, gbps, gflops, floor_s)),
            n_head=N_HEAD,
        )
        for n_ctx in ATTENTION_CONTEXTS
        for n_tokens in ATTENTION_TOKENS
    )


def cpu_attention_points(sheet: MachineDatasheet) -> tuple[AttentionPoint, ...]:
    """At all physical cores, like the profiler's attention measurement."""
    threads = sheet.physical_cores
    f16 = cpu_gflops(sheet, KernelShape.DENSE, "F16", threads, TOKEN_COUNTS[-1])
    gbps = cpu_bandwidth_gbps(sheet, threads)
    floor_s = sheet.cpu_attention_head_floor_s
    return _attention_points(Device.CPU, gbps, f16 * sheet.cpu_attention_share, floor_s)


def gpu_attention_points(sheet: MachineDatasheet) -> tuple[AttentionPoint, ...]:
    gflops = sheet.gpu_tflops["F16"] * 1e3 * sheet.gpu_attention_share
    floor_s = sheet.gpu_attention_head_floor_s
    return _attention_points(Device.GPU, gpu_memory_gbps(sheet), gflops, floor_s)


# ------------------------------------------------------------------- whole profile


def gpu_memory_gbps(sheet: MachineDatasheet) -> float:
    return _rounded(sheet.vram_gbps * sheet.vram_efficiency)


def h2d_pinned_gbps(sheet: MachineDatasheet) -> float:
    return _rounded(sheet.pcie_link_gbps * sheet.pcie_pinned_efficiency)


def gpu_profile(sheet: MachineDatasheet) -> GpuProfile:
    pinned = h2d_pinned_gbps(sheet)
    return GpuProfile(
        name=sheet.gpu_name,
        vram_total_bytes=sheet.vram_bytes,
        kernels=gpu_kernel_points(sheet),
        h2d_pinned_gbps=pinned,
        h2d_pageable_gbps=_rounded(pinned * sheet.pageable_share),
        cpu_derate_under_copy=sheet.cpu_derate_under_copy,
        step_overhead_s=sheet.gpu_step_overhead_s,
        memory_gbps=gpu_memory_gbps(sheet),
        attention=gpu_attention_points(sheet),
        backend=sheet.gpu_backend,
        layer_overhead_s=sheet.gpu_layer_overhead_s,
    )


def described_hardware(sheet: MachineDatasheet) -> HardwareInfo:
    """What the hardware probe (engine.machine.hardware) would report on the machine, with
    nothing else running."""
    gpu = GpuInfo(
        index=0,
        name=sheet.gpu_name,
        uuid=f"GPU-described-{sheet.name}",
        vram_total_bytes=sheet.vram_bytes,
        vram_free_bytes=sheet.vram_bytes,
        vram_used_bytes=0,
        other_processes_bytes=0,
        pcie_generation_current=sheet.pcie_generation,
        pcie_generation_max=sheet.pcie_generation,
        pcie_width_current=sheet.pcie_width,
        pcie_width_max=sheet.pcie_width,
        compute_capability=sheet.compute_capability,
        backend=sheet.gpu_backend,
        integrated=sheet.gpu_integrated,
    )
    return HardwareInfo(
        cpu=CpuInfo(sheet.cpu_model, sheet.physical_cores, sheet.logical_cores, sheet.cpu_flags),
        memory=MemoryInfo(sheet.ram_bytes, int(sheet.ram_bytes * sheet.ram_available_share)),
        gpus=(gpu,),
        gpu_reason=None,
        driver_version=LLAMA_BUILD,
        cuda_driver_version=None,
        os=LLAMA_BUILD,
        llama_build=LLAMA_BUILD,
    )


def _figures(figures: dict[str, float]) -> str:
    return ", ".join(f"{quant} {value:g}" for quant, value in figures.items())


def profile_description(sheet: MachineDatasheet) -> str:
    """The datasheet's own words, then every figure and assumption the profile rests on."""
    return (
        f"{sheet.description} Described profile: datasheet figures and stated assumptions, "
        f"no measurement. DRAM {sheet.dram_gbps:g} GB/s peak x {sheet.dram_efficiency:g} "
        f"reached; VRAM {sheet.vram_gbps:g} GB/s peak x {sheet.vram_efficiency:g}; PCIe "
        f"{sheet.pcie_generation}.0 x{sheet.pcie_width} link {sheet.pcie_link_gbps:.1f} GB/s x "
        f"{sheet.pcie_pinned_efficiency:g} pinned, pageable x {sheet.pageable_share:g} of "
        f"pinned; CPU x {sheet.cpu_derate_under_copy:g} during copies; GPU step overhead "
        f"{sheet.gpu_step_overhead_s * 1e6:g} us, {sheet.gpu_layer_overhead_s * 1e6:g} us per "
        f"block, {sheet.gpu_expert_overhead_s * 1e6:g} us per routed expert; CPU "
        f"{sheet.cpu_expert_overhead_s * 1e6:g} us per routed expert (fitted to the "
        "calibration table, engine/machine/calibration/measurements.csv). CPU GFLOP/s per "
        "core at large batch: "
        f"{_figures(sheet.cpu_gflops_per_core)} ({CPU_GFLOPS_SOURCE}). GPU TFLOP/s at large "
        f"batch: {_figures(sheet.gpu_tflops)} ({GPU_TFLOPS_SOURCE}). Kernel times by roofline "
        "over a 4096-wide block: max(weight bytes / bandwidth, FLOPs / throughput), batches "
        "reaching tokens / (tokens + k) of the throughput, 1-token CPU steps "
        f"{sheet.cpu_single_token_share:g} of it (engine/machine/described_machines.py)."
    )


def describe(sheet: MachineDatasheet) -> Profile:
    """The profile a datasheet implies, marked as described."""
    hardware = described_hardware(sheet)
    threads = sheet.thread_counts
    return Profile(
        fingerprint=hardware.fingerprint(),
        llama_build=LLAMA_BUILD,
        mode=ProfileMode.DESCRIBED,
        created_at=CREATED_AT,
        duration_s=0.0,
        physical_cores=sheet.physical_cores,
        cpu_kernels=cpu_kernel_points(sheet),
        cpu_call_overhead_s={t: _rounded(call_overhead_s(sheet, t)) for t in threads},
        cpu_layer_overhead_s={t: _rounded(block_overhead_s(sheet, t)) for t in threads},
        dram_read_gbps=_rounded(sheet.dram_gbps * sheet.dram_efficiency),
        gpu=gpu_profile(sheet),
        cpu_attention=cpu_attention_points(sheet),
        hardware=hardware.to_dict(),
        description=profile_description(sheet),
        expert_overhead_s={
            Device.CPU.value: sheet.cpu_expert_overhead_s,
            Device.GPU.value: sheet.gpu_expert_overhead_s,
        },
    )


# ------------------------------------------------------------------ shipped files


def described_names() -> tuple[str, ...]:
    return tuple(DESCRIBED_MACHINES)


def load_described(name: str) -> Profile:
    """The shipped described profile of a machine, by name ("laptop-8gb", ...)."""
    if name not in DESCRIBED_MACHINES:
        known = ", ".join(described_names())
        raise BadInputError(f"unknown described machine {name!r}; known: {known}")
    text = (files("engine.machine") / "described" / f"{name}.json").read_text(encoding="utf-8")
    return Profile.from_json(text)


def _write_atomically(path: Path, text: str) -> None:
    handle, part = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(part, 0o644)  # mkstemp makes it private; a shipped file is not
        os.replace(part, path)
    except BaseException:
        Path(part).unlink(missing_ok=True)
        raise


def write_described_files(folder: Path) -> list[Path]:
    """(Re)write one JSON file per described machine into `folder`; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, sheet in DESCRIBED_MACHINES.items():
        path = folder / f"{name}.json"
        _write_atomically(path, describe(sheet).to_json() + "\n")
        logger.info("wrote %s (%d bytes)", path, path.stat().st_size)
        paths.append(path)
    return paths


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    write_described_files(Path(__file__).resolve().with_name("described"))


if __name__ == "__main__":
    main()
