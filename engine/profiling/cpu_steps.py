"""The measurements the profiler runs, each meant to execute in its own child process.

Every function here takes plain, picklable arguments, writes the micro-models
it needs into the given folder, times llama_decode through `DecodeTimer`,
and returns plain values. If llama.cpp crashes or hangs inside one, only
that child dies and the profiler records the configuration as unusable.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

from engine.machine.profile import AttentionPoint, Device, KernelPoint, KernelShape, RepackResult
from engine.model.inventory import SubLayerKind, read_inventory
from engine.profiling.decode_timer import DecodeTimer
from engine.profiling.micro_models import (
    ATTENTION,
    HEAD,
    HEAD_VOCAB,
    STREAMED_BYTES,
    TINY,
    WIDE,
    MicroShape,
    block_flops_per_token,
    block_of,
    micro_model,
    model_pair,
)

_MIN_SECONDS = 1e-7
REPACK_TOKENS = 64


def measure_kernels(
    folder: str,
    shape: MicroShape,
    quant: str,
    thread_counts: tuple[int, ...],
    token_counts: tuple[int, ...],
    repeats: int,
) -> tuple[KernelPoint, ...]:
    """Seconds per CPU block of `shape` in `quant` for every thread and token count."""
    return measure_kernels_with(
        folder, shape, quant, thread_counts, token_counts, repeats, Device.CPU
    )


def measure_kernels_with(
    folder: str, shape: MicroShape, quant: str, thread_counts: tuple[int, ...],
    token_counts: tuple[int, ...], repeats: int, device: Device, n_gpu_layers: int = 0,
    streamed_bytes: int = STREAMED_BYTES,
) -> tuple[KernelPoint, ...]:  # fmt: skip
    """Seconds per block on `device` (blocks offloaded with n_gpu_layers for the GPU)."""
    one, more, extra = model_pair(Path(folder), shape, quant, streamed_bytes)
    block, expert_share = block_of(more)
    flops_per_token = block_flops_per_token(block, expert_share)
    points = []
    n_batch = max(token_counts)
    with (
        _timer(one, n_batch, n_gpu_layers=n_gpu_layers) as a,
        _timer(more, n_batch, n_gpu_layers=n_gpu_layers) as b,
    ):
        for threads in thread_counts:
            a.set_threads(threads)
            b.set_threads(threads)
            _warm_up(a, b, max(token_counts))
            for n_tokens in token_counts:
                seconds = per_layer_seconds(a, b, extra, n_tokens, repeats_for(n_tokens, repeats))
                points.append(
                    KernelPoint(
                        device=device,
                        shape=shape.kernel,
                        quant=quant,
                        threads=threads,
                        n_tokens=n_tokens,
                        seconds_per_layer=seconds,
                        flops_per_layer=flops_per_token * n_tokens,
                        bytes_per_layer=block.n_bytes,
                    )
                )
    return tuple(points)


def measure_fixed_costs(
    folder: str, thread_counts: tuple[int, ...], repeats: int
) -> tuple[dict[int, float], dict[int, float]]:
    """Per-call and per-block fixed costs (threads -> seconds), from a model too small to matter."""
    one, more, extra = model_pair(Path(folder), TINY, "F32")
    call: dict[int, float] = {}
    layer: dict[int, float] = {}
    with _timer(one, 16) as a, _timer(more, 16) as b:
        for threads in thread_counts:
            a.set_threads(threads)
            b.set_threads(threads)
            _warm_up(a, b, 1)
            layer[threads] = per_layer_seconds(a, b, extra, 1, repeats * 4)
            call[threads] = max(a.time_step(1, 0, 1, repeats * 4) - layer[threads], _MIN_SECONDS)
    return call, layer


def measure_head(
    folder: str, thread_counts: tuple[int, ...], token_counts: tuple[int, ...], repeats: int
) -> tuple[KernelPoint, ...]:
    """The output head: one block with a tall vocabulary minus the same block with a tiny one."""
    small = micro_model(Path(folder), HEAD, "Q8_0", 1)
    tall = micro_model(Path(folder), replace(HEAD, vocab_size=HEAD_VOCAB), "Q8_0", 1)
    head = next(s for s in read_inventory(tall).globals if s.kind is SubLayerKind.OUTPUT_HEAD)
    points = []
    with _timer(small, max(token_counts)) as a, _timer(tall, max(token_counts)) as b:
        for threads in thread_counts:
            a.set_threads(threads)
            b.set_threads(threads)
            _warm_up(a, b, max(token_counts))
            for n_tokens in token_counts:
                seconds = per_layer_seconds(a, b, 1, n_tokens, repeats_for(n_tokens, repeats))
                points.append(
                    KernelPoint(
                        Device.CPU, KernelShape.HEAD, "Q8_0", threads, n_tokens, seconds,
                        2.0 * head.n_params * n_tokens, head.n_bytes,
                    )
                )  # fmt: skip
    return tuple(points)


def measure_dram_read_gbps(folder: str, threads: int, repeats: int) -> float:
    """Weight bytes per second of a one-token step over blocks far larger than any cache."""
    one, more, extra = model_pair(Path(folder), WIDE, "F16")
    block, _ = block_of(more)
    with _timer(one, 1) as a, _timer(more, 1) as b:
        a.set_threads(threads)
        b.set_threads(threads)
        _warm_up(a, b, 1)
        seconds = per_layer_seconds(a, b, extra, 1, repeats * 2)
    return block.n_bytes / seconds / 1e9


def measure_repack(folder: str, shape: MicroShape, threads: int, repeats: int) -> RepackResult:
    """Time Q4_0 blocks with llama.cpp's repacked CPU buffers and without them."""
    one, more, extra = model_pair(Path(folder), shape, "Q4_0")
    seconds = {}
    for repacked in (False, True):
        with (
            _timer(one, REPACK_TOKENS, repacked) as a,
            _timer(more, REPACK_TOKENS, repacked) as b,
        ):
            a.set_threads(threads)
            b.set_threads(threads)
            _warm_up(a, b, REPACK_TOKENS)
            seconds[repacked] = per_layer_seconds(a, b, extra, REPACK_TOKENS, repeats)
    speedup = seconds[False] / seconds[True]
    detail = f"Q4_0, {REPACK_TOKENS} tokens, {threads} threads: {speedup:.2f}x with repacking"
    return RepackResult(works=True, speedup=speedup, detail=detail)


def measure_attention(
    folder: str, threads: int, contexts: tuple[int, ...], token_counts: tuple[int, ...],
    repeats: int,
) -> tuple[AttentionPoint, ...]:  # fmt: skip
    """Extra seconds per block that a cached context of each length adds to a step."""
    one, more, extra = model_pair(Path(folder), ATTENTION, "Q8_0")
    n_head = read_inventory(more).n_head or 1
    n_ctx = max(contexts) + max(token_counts)
    points = []
    with _timer(one, 256, n_ctx=n_ctx) as a, _timer(more, 256, n_ctx=n_ctx) as b:
        a.set_threads(threads)
        b.set_threads(threads)
        for context in sorted(contexts):
            a.prefill(context)
            b.prefill(context)
            for n_tokens in token_counts:
                seconds = per_layer_seconds(a, b, extra, n_tokens, repeats, n_past=context)
                points.append(AttentionPoint(Device.CPU, context, n_tokens, seconds, n_head))
    return minus_empty_context(points)


def minus_empty_context(points: list[AttentionPoint]) -> tuple[AttentionPoint, ...]:
    """Keep only what the context adds: subtract the same step's time with no context."""
    empty = {p.n_tokens: p.seconds_per_layer for p in points if p.n_ctx == 0}
    return tuple(
        AttentionPoint(
            p.device, p.n_ctx, p.n_tokens, max(p.seconds_per_layer - empty[p.n_tokens], 0.0),
            p.n_head,
        )
        for p in points
        if p.n_ctx > 0
    )  # fmt: skip


def per_layer_seconds(
    a: DecodeTimer, b: DecodeTimer, extra: int, n_tokens: int, repeats: int, n_past: int = 0
) -> float:
    """Median of (time with 1 + extra blocks - time with one block) / extra, interleaved."""
    differences = []
    for _ in range(repeats):
        single = a.time_step(n_tokens, n_past, n_tokens, 1)
        several = b.time_step(n_tokens, n_past, n_tokens, 1)
        differences.append((several - single) / extra)
    return max(statistics.median(differences), _MIN_SECONDS)


def repeats_for(n_tokens: int, repeats: int) -> int:
    """Small steps are noisy and cheap: repeat them more (a median of three at least, so one
    step slowed by another process on a shared machine cannot make a figure)."""
    return max(3, repeats) if n_tokens <= 16 else max(2, repeats // 2)


def _timer(
    path: Path,
    n_batch: int,
    use_extra_bufts: bool = True,
    n_ctx: int = 256,
    n_gpu_layers: int = 0,
) -> DecodeTimer:
    return DecodeTimer(
        path,
        n_ctx=max(n_ctx, n_batch),
        n_batch=n_batch,
        threads=1,
        use_extra_bufts=use_extra_bufts,
        n_gpu_layers=n_gpu_layers,
    )


def _warm_up(a: DecodeTimer, b: DecodeTimer, n_tokens: int) -> None:
    """Page the weights in and size the compute buffers before anything is timed."""
    a.time_step(n_tokens, 0, n_tokens, 1)
    b.time_step(n_tokens, 0, n_tokens, 1)
