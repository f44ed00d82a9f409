"""The profiler's GPU measurements, each run in its own child process.

They run on whatever GPU backend this llama.cpp build has (CUDA, Vulkan,
Metal, ...): nothing here names one, llama.cpp picks the device. The profile
records which backend and ggml device that was (engine.machine.hardware's first GPU).

Same differential method as the CPU steps (a 1-block and a (1 + k)-block
micro-model), with the blocks offloaded (n_gpu_layers) or left in host memory
so that llama.cpp's op offload streams their weights over PCIe for large
batches. Streaming from pinned memory (no mmap: a GPU build then keeps host
weights page-locked) and from pageable memory (mmap) gives the two
host-to-device bandwidths as llama.cpp sees them; CPU steps timed while a
streaming loop runs on another thread give the CPU's derating under copies.

Only a llama.cpp build with a GPU backend can run these: without one,
n_gpu_layers is silently ignored and the "GPU" figures would be CPU ones, so
`require_gpu_backend` refuses first.

A software GPU (Mesa's lavapipe) computes on the CPU at about 1-2 GFLOPS, where
the real-GPU sizes take minutes per step: it gets `SOFTWARE_GPU_SIZES`, smaller
micro-models and batches (still above the op-offload boundary where a step
streams), so that the same steps run and measure it. First run on lavapipe
(make test-gpu, bench/costmodel_accuracy.py --gpu); on NVIDIA hardware pending,
see bench/gpu_check.sh.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from engine.llama.backends import why_no_gpu
from engine.llama.ggml_devices import has_gpu_backend
from engine.machine.profile import AttentionPoint, Device, KernelPoint
from engine.profiling.cpu_steps import (
    measure_kernels_with,
    minus_empty_context,
    per_layer_seconds,
)
from engine.profiling.decode_timer import DecodeTimer
from engine.profiling.micro_models import (
    ATTENTION,
    DENSE,
    STREAMED_BYTES,
    TINY,
    WIDE,
    MicroShape,
    block_of,
    model_pair,
)

ALL_LAYERS = 9999
MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuStepSizes:
    """How large the GPU steps' micro-models and batches are."""

    token_counts: tuple[int, ...] = (1, 4, 16, 64, 256)
    # far above GGML_OP_OFFLOAD_MIN_BATCH (32): host weights go to the GPU
    stream_tokens: int = 256
    streamed_bytes: int = STREAMED_BYTES  # what the extra blocks of a pair hold


REAL_GPU_SIZES = GpuStepSizes()
SOFTWARE_GPU_SIZES = GpuStepSizes((1, 4, 16, 64), stream_tokens=64, streamed_bytes=16 * MIB)


def require_gpu_backend() -> None:
    if not has_gpu_backend():
        raise RuntimeError(f"llama.cpp has no GPU device here ({why_no_gpu()})")


def measure_gpu_kernels(
    folder: str, shape: MicroShape, quant: str, repeats: int, sizes: GpuStepSizes = REAL_GPU_SIZES
) -> tuple[KernelPoint, ...]:
    """Seconds per GPU-resident block for each token count (threads do not matter: 1)."""
    require_gpu_backend()
    return measure_kernels_with(
        folder, shape, quant, (1,), sizes.token_counts, repeats, Device.GPU,
        n_gpu_layers=ALL_LAYERS, streamed_bytes=sizes.streamed_bytes,
    )  # fmt: skip


def measure_gpu_fixed_cost(
    folder: str, repeats: int, sizes: GpuStepSizes = REAL_GPU_SIZES
) -> tuple[float, float]:
    """(seconds per llama_decode call, seconds per block) a GPU step costs besides its work.

    Blocks of the TINY micro-model do next to no arithmetic, so their per-block time
    is what launching a block's kernels costs (about 20 ms a block on lavapipe).
    """
    require_gpu_backend()
    one, more, extra = model_pair(Path(folder), TINY, "F32", sizes.streamed_bytes)
    with _gpu(one, 16) as a, _gpu(more, 16) as b:
        a.time_step(1, 0, 1, 1)
        b.time_step(1, 0, 1, 1)
        layer = per_layer_seconds(a, b, extra, 1, repeats * 4)
        return max(a.time_step(1, 0, 1, repeats * 4) - layer, 1e-7), layer


def measure_vram_gbps(folder: str, repeats: int, sizes: GpuStepSizes = REAL_GPU_SIZES) -> float:
    """VRAM bytes per second of a one-token step over resident blocks."""
    require_gpu_backend()
    one, more, extra = model_pair(Path(folder), WIDE, "F16", sizes.streamed_bytes)
    block, _ = block_of(more)
    with _gpu(one, 1) as a, _gpu(more, 1) as b:
        a.time_step(1, 0, 1, 1)
        b.time_step(1, 0, 1, 1)
        return block.n_bytes / per_layer_seconds(a, b, extra, 1, repeats * 2) / 1e9


def measure_h2d_gbps(
    folder: str, threads: int, repeats: int, sizes: GpuStepSizes = REAL_GPU_SIZES
) -> tuple[float, float]:
    """(pinned, pageable) host-to-device GB/s: streamed minus resident block time, per byte."""
    require_gpu_backend()
    one, more, extra = model_pair(Path(folder), DENSE, "Q4_0", sizes.streamed_bytes)
    block, _ = block_of(more)
    pair = (one, more, extra, sizes.stream_tokens, repeats)
    resident = _per_layer(*pair, n_gpu_layers=ALL_LAYERS, use_mmap=True)
    results = []
    for use_mmap in (False, True):  # pinned, then pageable
        streamed = _per_layer(*pair, 0, use_mmap, threads)
        results.append(block.n_bytes / max(streamed - resident, 1e-7) / 1e9)
    return results[0], results[1]


def measure_cpu_derate_under_copy(
    folder: str, threads: int, repeats: int, sizes: GpuStepSizes = REAL_GPU_SIZES
) -> float:
    """CPU block speed while the GPU streams weights, as a share of its speed alone."""
    require_gpu_backend()
    one, more, extra = model_pair(Path(folder), DENSE, "Q8_0")
    _, stream_more, _ = model_pair(Path(folder), DENSE, "Q4_0", sizes.streamed_bytes)
    with _cpu(one, threads) as a, _cpu(more, threads) as b:
        a.time_step(16, 0, 16, 1)
        alone = per_layer_seconds(a, b, extra, 16, repeats)
        stop = threading.Event()
        streaming = (stream_more, sizes.stream_tokens, stop)
        copier = threading.Thread(target=_stream_until, args=streaming, daemon=True)
        copier.start()
        try:
            during = per_layer_seconds(a, b, extra, 16, repeats)
        finally:
            stop.set()
            copier.join()
    return min(alone / during, 1.0)


def measure_gpu_attention(
    folder: str, contexts: tuple[int, ...], token_counts: tuple[int, ...], repeats: int,
    sizes: GpuStepSizes = REAL_GPU_SIZES,
) -> tuple[AttentionPoint, ...]:  # fmt: skip
    require_gpu_backend()
    one, more, extra = model_pair(Path(folder), ATTENTION, "Q8_0", sizes.streamed_bytes)
    n_ctx = max(contexts) + max(token_counts)
    points = []
    with _gpu(one, 256, n_ctx) as a, _gpu(more, 256, n_ctx) as b:
        for context in sorted(contexts):
            a.prefill(context)
            b.prefill(context)
            for n_tokens in token_counts:
                seconds = per_layer_seconds(a, b, extra, n_tokens, repeats, n_past=context)
                points.append(
                    AttentionPoint(Device.GPU, context, n_tokens, seconds, ATTENTION.n_head)
                )
    return minus_empty_context(points)


def _per_layer(
    one: Path, more: Path, extra: int, n_tokens: int, repeats: int, n_gpu_layers: int,
    use_mmap: bool, threads: int = 1,
) -> float:  # fmt: skip
    timers = [
        DecodeTimer(p, n_tokens, n_tokens, threads, n_gpu_layers=n_gpu_layers,
                    use_mmap=use_mmap, stream_to_gpu=True)
        for p in (one, more)
    ]  # fmt: skip
    try:
        for timer in timers:
            timer.time_step(n_tokens, 0, 1, 1)
        single, several = timers
        return per_layer_seconds(single, several, extra, n_tokens, repeats)
    finally:
        for timer in timers:
            timer.close()


def _stream_until(path: Path, n_tokens: int, stop: threading.Event) -> None:
    with DecodeTimer(path, n_tokens, n_tokens, 1, use_mmap=False, stream_to_gpu=True) as timer:
        while not stop.is_set():
            timer.time_step(n_tokens, 0, 1, 1)


def _gpu(path: Path, n_batch: int, n_ctx: int = 256) -> DecodeTimer:
    return DecodeTimer(path, max(n_ctx, n_batch), n_batch, 1, n_gpu_layers=ALL_LAYERS)


def _cpu(path: Path, threads: int) -> DecodeTimer:
    return DecodeTimer(path, 256, 16, threads)
