"""The machines ShardChat is meant for, as their datasheets describe them.

Figures a datasheet gives (cores, memory speed, VRAM bandwidth, PCIe link),
the efficiencies assumed to turn them into speeds, and the per-core kernel
throughput measured here that CPU figures are scaled from. The described
profiles (engine.machine.described_machines) are made from these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 1024**3

# Bits per weight of each quant type, block scales included.
QUANT_BITS = {"F16": 16.0, "Q8_0": 8.5, "Q4_0": 4.5, "Q4_1": 5.0, "Q4_K": 4.5, "Q6_K": 6.5625}
QUANTS = tuple(QUANT_BITS)

# PCIe link peak per lane and direction in GB/s, after line encoding (128b/130b from 3.0 on).
PCIE_LANE_GBPS = {3: 0.985, 4: 1.969, 5: 3.938}

# Per-core GFLOP/s llama.cpp reached at 64-256 tokens, 1 thread, on our measured 2-core
# AMD EPYC (tests/data/profile-epyc-2core-fast.json; AVX-512 VNNI and AVX-VNNI, Zen 5
# class, assumed ~3.0 GHz). Q6_K was not measured: assumed 0.8 x Q4_K.
REFERENCE_GFLOPS_PER_CORE = {
    "F16": 107.0,
    "Q8_0": 105.0,
    "Q4_0": 118.0,
    "Q4_1": 61.0,
    "Q4_K": 121.0,
    "Q6_K": 97.0,
}
# Tokens at which a CPU kernel reaches half its large-batch throughput, fitted to the
# same measurements: F16 and Q8_0 need a batch for llamafile's sgemm; Q4 types less.
CPU_HALF_BATCH_TOKENS = {"F16": 6.0, "Q8_0": 6.0, "Q4_0": 1.0, "Q4_1": 1.0, "Q4_K": 1.0}

# fmt: off
ZEN4_FLAGS = (
    "avx", "avx2", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512f", "avx512vbmi",
    "avx512vl", "bmi2", "f16c", "fma", "sse3", "sse4_1", "sse4_2", "ssse3",
)
# fmt: on
ZEN5_FLAGS = tuple(sorted((*ZEN4_FLAGS, "avx_vnni")))


def scaled_reference(factor: float) -> dict[str, float]:
    """REFERENCE_GFLOPS_PER_CORE times a clock-and-core factor, rounded to 1 decimal."""
    return {quant: round(gflops * factor, 1) for quant, gflops in REFERENCE_GFLOPS_PER_CORE.items()}


# ----------------------------------------------------------------------------- datasheets


@dataclass(frozen=True)
class MachineDatasheet:
    """What a machine's datasheets say, and the efficiencies assumed to turn them into speeds."""

    name: str
    """Short key, also the JSON file's name: "laptop-8gb"."""
    description: str
    """Which parts, and that the figures are datasheet-derived, not measured."""
    cpu_model: str
    """As /proc/cpuinfo would name it."""
    physical_cores: int
    logical_cores: int
    ram_bytes: int
    dram_gbps: float
    """Theoretical peak: MT/s x 8 bytes x channels."""
    cpu_gflops_per_core: dict[str, float]
    """Quant -> GFLOP/s one core reaches with llama.cpp's kernels at a large batch."""
    gpu_name: str
    vram_bytes: int
    vram_gbps: float
    """Theoretical peak: bus width / 8 x data rate."""
    gpu_tflops: dict[str, float]
    """Quant -> dense TFLOP/s llama.cpp's CUDA kernels reach at a large batch (pp512)."""
    pcie_generation: int
    pcie_width: int
    compute_capability: tuple[int, int]
    cpu_flags: tuple[str, ...] = ZEN4_FLAGS
    """llama.cpp-relevant instruction sets, as engine.machine.hardware reports them."""
    dram_efficiency: float = 0.7
    """Share of the DRAM peak a multi-threaded read reaches (ours: ~35 of ~50 GB/s)."""
    single_thread_dram_share: float = 0.45
    """Share of the reached DRAM bandwidth one thread gets; t threads get 1 - (1 - s)^t."""
    vram_efficiency: float = 0.8
    """Share of the VRAM peak llama.cpp's decode kernels reach."""
    pcie_pinned_efficiency: float = 0.8
    """Share of the PCIe link peak a pinned copy reaches (4.0 x16: 31.5 -> ~25 GB/s)."""
    pageable_share: float = 0.5
    """Pageable copies (staged through a bounce buffer) as a share of pinned ones."""
    cpu_derate_under_copy: float = 0.85
    """CPU kernel speed while host->device copies compete for DRAM, as a share of alone."""
    gpu_step_overhead_s: float = 60e-6
    """Fixed GPU cost of one llama_decode (launches, sync) with CUDA graphs."""
    gpu_half_batch_tokens: float = 32.0
    """Tokens at which GPU kernels reach half their large-batch throughput."""
    cpu_single_token_share: float = 0.5
    """Share of the per-core peak a 1-token step reaches on llama.cpp's vec-dot path, whatever
    the quant (ours: 50-77 of 105-121 GFLOP/s, partly bandwidth-bound)."""
    parallel_efficiency: float = 0.9
    """Each thread past the first adds this share of a core's throughput."""
    moe_compute_share: float = 0.75
    """Expert-bank kernels' throughput as a share of dense ones (ours: 89 vs 118 GFLOP/s)."""
    cpu_attention_share: float = 0.12
    """CPU attention FLOP/s as a share of F16 kernels' (ours: 19-35 vs 213 GFLOP/s)."""
    gpu_attention_share: float = 0.25
    """GPU flash-attention FLOP/s as a share of F16 kernels'."""
    cpu_attention_head_floor_s: float = 2e-6
    """Fixed CPU attention cost per query head and block (softmax setup, KV writes)."""
    gpu_attention_head_floor_s: float = 0.1e-6
    """Fixed GPU attention cost per query head and block."""
    cpu_call_overhead_s: float = 6.4e-6
    """Fixed cost of one llama_decode call at 1 thread (ours: 6.4 us)."""
    cpu_call_overhead_per_doubling_s: float = 1.5e-6
    """What each doubling of threads adds to the call cost (ours: 6.4 -> 7.8 us)."""
    cpu_block_overhead_s: float = 6.6e-6
    """Fixed cost each CPU block adds to a call at 1 thread (ours: 6.6 us)."""
    cpu_block_overhead_per_doubling_s: float = 2.8e-6
    """What each doubling of threads adds to the per-block cost (ours: 6.6 -> 9.4 us)."""
    ram_available_share: float = 0.8
    """Share of RAM reported available (the OS and other programs hold the rest)."""

    def __post_init__(self) -> None:
        for figures in (self.cpu_gflops_per_core, self.gpu_tflops):
            missing = [quant for quant in QUANTS if quant not in figures]
            if missing:
                raise ValueError(f"{self.name}: no throughput for {', '.join(missing)}")

    @property
    def pcie_link_gbps(self) -> float:
        return PCIE_LANE_GBPS[self.pcie_generation] * self.pcie_width

    @property
    def thread_counts(self) -> tuple[int, ...]:
        """1, 2, 4, ... up to the physical cores, and the physical cores themselves."""
        doublings = int(math.log2(self.physical_cores))
        return tuple(sorted({2**i for i in range(doublings + 1)} | {self.physical_cores}))


LAPTOP_8GB = MachineDatasheet(
    name="laptop-8gb",
    description=(
        "Gaming laptop: AMD Ryzen 7 7840HS (8 Zen 4 cores, 16 threads, ~4.0 GHz sustained "
        "all-core assumed), 32 GB DDR5-5600 dual channel (89.6 GB/s peak), NVIDIA GeForce "
        "RTX 4060 Laptop GPU (24 SMs, 8 GB GDDR6, 128-bit at 16 Gbps = 256 GB/s) on PCIe "
        "4.0 x8. Datasheet-derived, not measured."
    ),
    cpu_model="AMD Ryzen 7 7840HS w/ Radeon 780M Graphics",
    physical_cores=8,
    logical_cores=16,
    ram_bytes=32 * GIB,
    dram_gbps=89.6,
    cpu_gflops_per_core=scaled_reference(4.0 / 3.0 * 0.75),  # Zen 4: 512-bit ops in 2 halves
    gpu_name="NVIDIA GeForce RTX 4060 Laptop GPU",
    vram_bytes=8 * GIB,
    vram_gbps=256.0,
    gpu_tflops={"F16": 17.0, "Q8_0": 28.0, "Q4_0": 28.0, "Q4_1": 26.0, "Q4_K": 24.0, "Q6_K": 21.0},
    pcie_generation=4,
    pcie_width=8,
    compute_capability=(8, 9),
)

DESKTOP_16GB = MachineDatasheet(
    name="desktop-16gb",
    description=(
        "Desktop: AMD Ryzen 9 7950X (16 Zen 4 cores, 32 threads, ~4.8 GHz all-core assumed), "
        "64 GB DDR5-6000 dual channel (96 GB/s peak), NVIDIA GeForce RTX 4070 Ti SUPER "
        "(66 SMs, 16 GB GDDR6X, 256-bit at 21 Gbps = 672 GB/s) on PCIe 4.0 x16. "
        "Datasheet-derived, not measured."
    ),
    cpu_model="AMD Ryzen 9 7950X 16-Core Processor",
    physical_cores=16,
    logical_cores=32,
    ram_bytes=64 * GIB,
    dram_gbps=96.0,
    cpu_gflops_per_core=scaled_reference(4.8 / 3.0 * 0.75),
    gpu_name="NVIDIA GeForce RTX 4070 Ti SUPER",
    vram_bytes=16 * GIB,
    vram_gbps=672.0,
    gpu_tflops={"F16": 60.0, "Q8_0": 95.0, "Q4_0": 95.0, "Q4_1": 90.0, "Q4_K": 85.0, "Q6_K": 72.0},
    pcie_generation=4,
    pcie_width=16,
    compute_capability=(8, 9),
)

RTX5090_DESKTOP = MachineDatasheet(
    name="rtx5090-desktop",
    description=(
        "Desktop: AMD Ryzen 9 9950X (16 Zen 5 cores with full-width AVX-512, 32 threads, "
        "~5.0 GHz all-core assumed), 96 GB DDR5-6000 dual channel (96 GB/s peak), NVIDIA "
        "GeForce RTX 5090 (170 SMs, 32 GB GDDR7, 512-bit at 28 Gbps = 1792 GB/s) on PCIe "
        "5.0 x16. Datasheet-derived, not measured."
    ),
    cpu_model="AMD Ryzen 9 9950X 16-Core Processor",
    physical_cores=16,
    logical_cores=32,
    ram_bytes=96 * GIB,
    dram_gbps=96.0,
    cpu_gflops_per_core=scaled_reference(5.0 / 3.0),
    gpu_name="NVIDIA GeForce RTX 5090",
    vram_bytes=32 * GIB,
    vram_gbps=1792.0,
    gpu_tflops={
        "F16": 150.0,
        "Q8_0": 235.0,
        "Q4_0": 235.0,
        "Q4_1": 225.0,
        "Q4_K": 210.0,
        "Q6_K": 180.0,
    },
    pcie_generation=5,
    pcie_width=16,
    compute_capability=(12, 0),
    cpu_flags=ZEN5_FLAGS,
)

DESCRIBED_MACHINES: dict[str, MachineDatasheet] = {
    sheet.name: sheet for sheet in (LAPTOP_8GB, DESKTOP_16GB, RTX5090_DESKTOP)
}

# Where the GPU figures come from, for every description.
GPU_TFLOPS_SOURCE = (
    "GPU TFLOP/s scaled by SM count x boost clock from public llama.cpp CUDA results of an "
    "RTX 4090 (~14k tokens/s prompt on Llama-2-7B Q4_0, ~185 TFLOP/s)"
)
CPU_GFLOPS_SOURCE = (
    "CPU GFLOP/s per core scaled by clock (and x0.75 for Zen 4's split 512-bit units) from "
    "our measured 2-core AMD EPYC (Zen 5 class, ~3.0 GHz assumed)"
)
