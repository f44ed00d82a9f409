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

# Fixed costs the roofline misses, per block and per routed expert of a llama_decode step.
# Fitted to rows of the calibration table (engine/machine/calibration/measurements.csv),
# each named by the row it came from, and then checked against the other rows:
# - GPU per-block cost (about 25 graph nodes a transformer block launches, at ~0.8 us each
#   under CUDA graphs, plus the norms' and rope's small kernels): what is left of the A10's
#   Qwen3-32B Q4_0 tg128 (23.22 tok/s, ggml-org/llama.cpp#13652) over its bandwidth roof.
# - GPU per-expert cost (MUL_MAT_ID runs one matrix-vector product per routed expert used;
#   at batch 1 an expert's 0.9 MB of weights take well under a microsecond to read, so the
#   launch and the id gather dominate): the rest of the same A10's Qwen3-30B-A3B Q4_0 tg128
#   (103.5 tok/s, same thread) once the per-block cost is taken off.
# - CPU per-expert cost ("small matrices": an expert's 768 x 2048 matrices split over all
#   threads leave each a few rows, so thread start, barriers and DRAM ramp-up cost more than
#   the bytes): the RTX 2080 + i9-10900X --n-cpu-moe 36 run (36.7 tok/s, AlexsJones/llmfit#755)
#   over its DRAM roof.
# Vulkan's figures are assumed equal to CUDA's: its rows in the table are dense models only.
GPU_LAYER_OVERHEAD_S = 20e-6
GPU_EXPERT_OVERHEAD_S = 12e-6
CPU_EXPERT_OVERHEAD_S = 25e-6

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


# The RTX 4090's TFLOP/s by quant (the 4070 Ti SUPER's figures below scaled by SMs x boost
# clock), and its SMs x boost GHz. Other NVIDIA GPUs are scaled from it the same way: Turing,
# Ampere and Ada reach the same int8 tensor throughput per SM and clock.
RTX4090_TFLOPS = {
    "F16": 112.0,
    "Q8_0": 178.0,
    "Q4_0": 178.0,
    "Q4_1": 169.0,
    "Q4_K": 159.0,
    "Q6_K": 135.0,
}
RTX4090_SM_GHZ = 128 * 2.52
# AMD and Intel GPUs under Vulkan: the share of their FP16 peak (matrix cores where there
# are, else packed vectors) llama.cpp's Vulkan matrix kernels reach at a large batch. Fitted
# to the one such row in the table (RX 5700 XT pp512, ggml-org/llama.cpp#13324); an
# assumption for every other AMD or Intel GPU.
VULKAN_FP16_SHARE = 0.36
# ... and the share of their VRAM bandwidth its decode kernels reach: fitted to the same
# GPU's tg128 (65.19 tok/s for 3.8 GB a token, ggml-org/llama.cpp#13324); assumed for the
# other AMD and Intel GPUs. NVIDIA GPUs under Vulkan keep vram_efficiency's 0.8: the RTX
# 3090's tg128 rows in the table check it.
VULKAN_VRAM_EFFICIENCY = 0.6
# Apple GPUs under Metal: llama.cpp's simdgroup matrix kernels dequantize every quant to
# F16 in threadgroup memory, so all quants run at about one rate, this share of the FP32
# peak (fitted to the M1 Max's Llama 2 7B Q4_0 pp512, ggml-org/llama.cpp#4167); decode
# reaches this share of the unified memory's bandwidth (fitted to its Q8_0 tg128).
METAL_FP32_SHARE = 0.75
METAL_MEMORY_EFFICIENCY = 0.7
AVX2_FLAGS = ("avx", "avx2", "bmi2", "f16c", "fma", "sse3", "sse4_1", "sse4_2", "ssse3")
CASCADE_LAKE_FLAGS = tuple(sorted((*AVX2_FLAGS, "avx512bw", "avx512f", "avx512vl", "avx512_vnni")))


def nvidia_tflops(sms: int, boost_ghz: float) -> dict[str, float]:
    """RTX4090_TFLOPS scaled by SMs x boost clock, rounded to 1 decimal."""
    factor = sms * boost_ghz / RTX4090_SM_GHZ
    return {quant: round(tflops * factor, 1) for quant, tflops in RTX4090_TFLOPS.items()}


def metal_tflops(fp32_peak_tflops: float) -> dict[str, float]:
    """METAL_FP32_SHARE of an Apple GPU's FP32 peak, the same for every quant."""
    return {quant: round(fp32_peak_tflops * METAL_FP32_SHARE, 1) for quant in RTX4090_TFLOPS}


def vulkan_tflops(fp16_peak_tflops: float) -> dict[str, float]:
    """VULKAN_FP16_SHARE of an FP16 peak, spread over the quants as the RTX 4090's are."""
    q4_0 = fp16_peak_tflops * VULKAN_FP16_SHARE
    ratio = {quant: tflops / RTX4090_TFLOPS["Q4_0"] for quant, tflops in RTX4090_TFLOPS.items()}
    return {quant: round(q4_0 * share, 1) for quant, share in ratio.items()}


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
    compute_capability: tuple[int, int] | None
    """CUDA's (major, minor); None for a GPU that is not NVIDIA's."""
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
    gpu_small_batch_share: float = 0.25
    """Least share of the large-batch throughput a GPU step reaches however few its tokens:
    a few tokens take llama.cpp's matrix-vector kernels, bound by bandwidth rather than by
    the matrix kernels' ramp (assumed; it decides only where the large-batch rate is low,
    as on an RX 5700 XT, whose tg128 the ramp alone put at a fifth of what was published)."""
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
    gpu_backend: str = "CUDA"
    """The ggml backend the GPU runs under: "CUDA", "Vulkan" or "Metal"."""
    gpu_integrated: bool = False
    """The GPU's memory is system RAM (Apple silicon): no PCIe link, the link figures unused."""
    gpu_layer_overhead_s: float = GPU_LAYER_OVERHEAD_S
    """Fixed GPU cost of each block a step computes there: its kernel launches."""
    gpu_expert_overhead_s: float = GPU_EXPERT_OVERHEAD_S
    """Fixed GPU cost of each routed expert a block runs (MUL_MAT_ID, one product per expert)."""
    cpu_expert_overhead_s: float = CPU_EXPERT_OVERHEAD_S
    """Fixed CPU cost of each routed expert a block runs: small matrices over many threads."""

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


# --- the GPUs and CPUs users have (no rows in the calibration table unless said) ---

RTX3060_DESKTOP = MachineDatasheet(
    name="rtx3060-desktop",
    description=(
        "Desktop: AMD Ryzen 5 5600X (6 Zen 3 cores, 12 threads, AVX2 only, ~4.4 GHz all-core "
        "assumed), 32 GB DDR4-3200 dual channel (51.2 GB/s peak), NVIDIA GeForce RTX 3060 "
        "(28 SMs, 12 GB GDDR6, 192-bit at 15 Gbps = 360 GB/s) on PCIe 4.0 x16. "
        "Datasheet-derived, not measured."
    ),
    cpu_model="AMD Ryzen 5 5600X 6-Core Processor",
    physical_cores=6,
    logical_cores=12,
    ram_bytes=32 * GIB,
    dram_gbps=51.2,
    cpu_gflops_per_core=scaled_reference(4.4 / 3.0 * 0.5),  # 256-bit, no VNNI: half assumed
    gpu_name="NVIDIA GeForce RTX 3060",
    vram_bytes=12 * GIB,
    vram_gbps=360.0,
    gpu_tflops=nvidia_tflops(28, 1.777),
    pcie_generation=4,
    pcie_width=16,
    compute_capability=(8, 6),
    cpu_flags=AVX2_FLAGS,
)

RTX4090_DESKTOP = MachineDatasheet(
    name="rtx4090-desktop",
    description=(
        "Desktop: AMD Ryzen 9 7950X (16 Zen 4 cores, 32 threads, ~4.8 GHz all-core assumed), "
        "64 GB DDR5-6000 dual channel (96 GB/s peak), NVIDIA GeForce RTX 4090 (128 SMs, "
        "24 GB GDDR6X, 384-bit at 21 Gbps = 1008 GB/s) on PCIe 4.0 x16. "
        "Datasheet-derived, not measured."
    ),
    cpu_model="AMD Ryzen 9 7950X 16-Core Processor",
    physical_cores=16,
    logical_cores=32,
    ram_bytes=64 * GIB,
    dram_gbps=96.0,
    cpu_gflops_per_core=scaled_reference(4.8 / 3.0 * 0.75),
    gpu_name="NVIDIA GeForce RTX 4090",
    vram_bytes=24 * GIB,
    vram_gbps=1008.0,
    gpu_tflops=dict(RTX4090_TFLOPS),
    pcie_generation=4,
    pcie_width=16,
    compute_capability=(8, 9),
)

RX7900XTX_VULKAN = MachineDatasheet(
    name="rx7900xtx-vulkan",
    description=(
        "Desktop: AMD Ryzen 7 7800X3D (8 Zen 4 cores, 16 threads, ~4.8 GHz all-core assumed), "
        "32 GB DDR5-6000 dual channel (96 GB/s peak), AMD Radeon RX 7900 XTX (96 CUs, 24 GB "
        "GDDR6, 384-bit at 20 Gbps = 960 GB/s, 122.8 TFLOP/s FP16 matrix peak) on PCIe 4.0 "
        "x16, under llama.cpp's Vulkan backend. Datasheet-derived, not measured."
    ),
    cpu_model="AMD Ryzen 7 7800X3D 8-Core Processor",
    physical_cores=8,
    logical_cores=16,
    ram_bytes=32 * GIB,
    dram_gbps=96.0,
    cpu_gflops_per_core=scaled_reference(4.8 / 3.0 * 0.75),
    gpu_name="AMD Radeon RX 7900 XTX",
    vram_bytes=24 * GIB,
    vram_gbps=960.0,
    gpu_tflops=vulkan_tflops(122.8),
    vram_efficiency=VULKAN_VRAM_EFFICIENCY,
    pcie_generation=4,
    pcie_width=16,
    compute_capability=None,
    gpu_backend="Vulkan",
)

ARC_A770_VULKAN = MachineDatasheet(
    name="arc-a770-vulkan",
    description=(
        "Desktop: AMD Ryzen 5 7600 (6 Zen 4 cores, 12 threads, ~4.9 GHz all-core assumed), "
        "32 GB DDR5-6000 dual channel (96 GB/s peak), Intel Arc A770 (32 Xe cores, 16 GB "
        "GDDR6, 256-bit at 17.5 Gbps = 560 GB/s, 39.3 TFLOP/s FP16 vector peak) on PCIe 4.0 "
        "x16, under llama.cpp's Vulkan backend. Datasheet-derived, not measured."
    ),
    cpu_model="AMD Ryzen 5 7600 6-Core Processor",
    physical_cores=6,
    logical_cores=12,
    ram_bytes=32 * GIB,
    dram_gbps=96.0,
    cpu_gflops_per_core=scaled_reference(4.9 / 3.0 * 0.75),
    gpu_name="Intel(R) Arc(TM) A770 Graphics",
    vram_bytes=16 * GIB,
    vram_gbps=560.0,
    gpu_tflops=vulkan_tflops(39.3),
    vram_efficiency=VULKAN_VRAM_EFFICIENCY,
    pcie_generation=4,
    pcie_width=16,
    compute_capability=None,
    gpu_backend="Vulkan",
)

# --- the machines of the calibration table's rows ---

A10_SERVER = MachineDatasheet(
    name="a10-server",
    description=(
        "Server with an NVIDIA A10 (72 SMs, 24 GB GDDR6, 384-bit at 12.5 Gbps = 600 GB/s) on "
        "PCIe 4.0 x16, as a full-card vGPU (A10-24Q) in ggml-org/llama.cpp#13652; the host "
        "CPU is not stated there: a 16-core AMD EPYC 7313 (Zen 3, ~3.4 GHz, 8 channels of "
        "DDR4-3200 = 204.8 GB/s) is assumed, which no row of the table uses. "
        "Datasheet-derived, not measured."
    ),
    cpu_model="AMD EPYC 7313 16-Core Processor",
    physical_cores=16,
    logical_cores=32,
    ram_bytes=128 * GIB,
    dram_gbps=204.8,
    cpu_gflops_per_core=scaled_reference(3.4 / 3.0 * 0.5),
    gpu_name="NVIDIA A10",
    vram_bytes=24 * GIB,
    vram_gbps=600.0,
    gpu_tflops=nvidia_tflops(72, 1.695),
    pcie_generation=4,
    pcie_width=16,
    compute_capability=(8, 6),
    cpu_flags=AVX2_FLAGS,
)

RTX3090_VULKAN = MachineDatasheet(
    name="rtx3090-vulkan",
    description=(
        "Desktop with an NVIDIA GeForce RTX 3090 (82 SMs, 24 GB GDDR6X, 384-bit at 19.5 Gbps "
        "= 936 GB/s) on PCIe 4.0 x16 under llama.cpp's Vulkan backend (NV_coopmat2), as in "
        "ggml-org/llama.cpp#21024; the host is not stated there: a Ryzen 9 5950X (16 Zen 3 "
        "cores, DDR4-3200 dual channel) is assumed, which no row uses. Datasheet-derived, "
        "not measured."
    ),
    cpu_model="AMD Ryzen 9 5950X 16-Core Processor",
    physical_cores=16,
    logical_cores=32,
    ram_bytes=64 * GIB,
    dram_gbps=51.2,
    cpu_gflops_per_core=scaled_reference(4.5 / 3.0 * 0.5),
    gpu_name="NVIDIA GeForce RTX 3090",
    vram_bytes=24 * GIB,
    vram_gbps=936.0,
    gpu_tflops=nvidia_tflops(82, 1.695),  # coopmat2 reaches CUDA's MMQ rate: assumed
    pcie_generation=4,
    pcie_width=16,
    compute_capability=(8, 6),
    cpu_flags=AVX2_FLAGS,
    gpu_backend="Vulkan",
)

RX5700XT_VULKAN = MachineDatasheet(
    name="rx5700xt-vulkan",
    description=(
        "Desktop with an AMD Radeon RX 5700 XT (40 CUs, no matrix cores, 8 GB GDDR6, 256-bit "
        "at 14 Gbps = 448 GB/s, 19.5 TFLOP/s FP16 packed-vector peak) on PCIe 4.0 x16 under "
        "llama.cpp's Vulkan backend (RADV), as in ggml-org/llama.cpp#13324; the host is not "
        "stated there: a Ryzen 7 5800X (8 Zen 3 cores, DDR4-3200 dual channel) is assumed, "
        "which no row uses. Datasheet-derived, not measured."
    ),
    cpu_model="AMD Ryzen 7 5800X 8-Core Processor",
    physical_cores=8,
    logical_cores=16,
    ram_bytes=32 * GIB,
    dram_gbps=51.2,
    cpu_gflops_per_core=scaled_reference(4.5 / 3.0 * 0.5),
    gpu_name="AMD Radeon RX 5700 XT",
    vram_bytes=8 * GIB,
    vram_gbps=448.0,
    gpu_tflops=vulkan_tflops(19.5),
    vram_efficiency=VULKAN_VRAM_EFFICIENCY,
    pcie_generation=4,
    pcie_width=16,
    compute_capability=None,
    cpu_flags=AVX2_FLAGS,
    gpu_backend="Vulkan",
)

RTX2080_I9_10900X = MachineDatasheet(
    name="rtx2080-i9-10900x",
    description=(
        "Desktop: Intel Core i9-10900X (10 Cascade Lake cores, 20 threads, AVX-512 with VNNI, "
        "~4.3 GHz all-core assumed), 64 GB DDR4-2933 quad channel (93.9 GB/s peak), NVIDIA "
        "GeForce RTX 2080 (46 SMs, 8 GB GDDR6, 256-bit at 14 Gbps = 448 GB/s) on PCIe 3.0 "
        "x16, as in AlexsJones/llmfit#755. Datasheet-derived, not measured."
    ),
    cpu_model="Intel(R) Core(TM) i9-10900X CPU @ 3.70GHz",
    physical_cores=10,
    logical_cores=20,
    ram_bytes=64 * GIB,
    dram_gbps=93.9,
    cpu_gflops_per_core=scaled_reference(4.3 / 3.0 * 0.75),
    gpu_name="NVIDIA GeForce RTX 2080",
    vram_bytes=8 * GIB,
    vram_gbps=448.0,
    gpu_tflops=nvidia_tflops(46, 1.71),
    pcie_generation=3,
    pcie_width=16,
    compute_capability=(7, 5),
    cpu_flags=CASCADE_LAKE_FLAGS,
)

M1_MAX_METAL = MachineDatasheet(
    name="m1max-metal",
    description=(
        "Apple MacBook Pro / Mac Studio: M1 Max (8 performance and 2 efficiency cores; a "
        "32-core GPU, 10.4 TFLOP/s FP32), 64 GB LPDDR5-6400 unified memory on a 512-bit bus "
        "(409.6 GB/s), the GPU allowed about 3/4 of it (Metal's recommended working set), "
        "under llama.cpp's Metal backend, as in ggml-org/llama.cpp#4167. Unified memory: the "
        "PCIe figures are placeholders no plan there streams over. Datasheet-derived, not "
        "measured."
    ),
    cpu_model="Apple M1 Max",
    physical_cores=8,
    logical_cores=10,
    ram_bytes=64 * GIB,
    dram_gbps=409.6,
    cpu_gflops_per_core=scaled_reference(3.2 / 3.0 * 0.5),  # NEON, 128-bit: assumed
    gpu_name="Apple M1 Max",
    vram_bytes=48 * GIB,
    vram_gbps=409.6,
    gpu_tflops=metal_tflops(10.4),
    pcie_generation=4,
    pcie_width=16,
    compute_capability=None,
    cpu_flags=(),
    vram_efficiency=METAL_MEMORY_EFFICIENCY,
    gpu_backend="Metal",
    gpu_integrated=True,
)

DESCRIBED_MACHINES: dict[str, MachineDatasheet] = {
    sheet.name: sheet
    for sheet in (
        LAPTOP_8GB,
        DESKTOP_16GB,
        RTX5090_DESKTOP,
        RTX3060_DESKTOP,
        RTX4090_DESKTOP,
        RX7900XTX_VULKAN,
        ARC_A770_VULKAN,
        A10_SERVER,
        RTX3090_VULKAN,
        RX5700XT_VULKAN,
        RTX2080_I9_10900X,
        M1_MAX_METAL,
    )
}

# Where the GPU figures come from, for every description.
GPU_TFLOPS_SOURCE = (
    "NVIDIA GPU TFLOP/s scaled by SM count x boost clock from public llama.cpp CUDA results of "
    "an RTX 4090 (~14k tokens/s prompt on Llama-2-7B Q4_0, ~185 TFLOP/s); AMD and Intel GPUs "
    f"under Vulkan {VULKAN_FP16_SHARE:g} of their FP16 peak, Apple GPUs under Metal "
    f"{METAL_FP32_SHARE:g} of their FP32 peak"
)
CPU_GFLOPS_SOURCE = (
    "CPU GFLOP/s per core scaled by clock (and x0.75 for Zen 4's split 512-bit units) from "
    "our measured 2-core AMD EPYC (Zen 5 class, ~3.0 GHz assumed)"
)
