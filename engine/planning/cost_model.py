"""Predicting how long a llama_decode step takes, from a profile, by roofline.

Each sub-layer costs max(bytes it reads / bandwidth, FLOPs / throughput),
where throughput is what the profiler measured for the nearest quant, thread
count and token count (interpolated over token counts). Weights a placement
streams over PCIe add their copy time, or, where the placement uploads them ahead
through staging slots (prefetch), only what the compute does not hide; CPU work
slows down while copies run.
Fixed costs per call, per block and per routed expert a step runs come from
the profile too (the roofline misses them, and MoE decode is made of them). The planner
compares placements with these predictions, so they must track what
llama.cpp really does: llama.cpp computes only the output rows in the last
block's feed-forward part, and the output head only for tokens whose logits
are requested, and so does this model.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace
from enum import Enum

from engine.machine.profile import (
    AttentionPoint,
    Device,
    GpuProfile,
    KernelPoint,
    KernelShape,
    Profile,
)
from engine.model.inventory import BlockInventory, ModelInventory, SubLayer, SubLayerKind

# A quant type the profile did not measure behaves most like this measured one.
QUANT_FAMILY = {
    "F32": "F16",
    "BF16": "F16",
    "Q8_1": "Q8_0",
    "Q5_0": "Q4_1",
    "Q5_1": "Q4_1",
    "Q2_K": "Q4_K",
    "Q3_K": "Q4_K",
    "Q5_K": "Q4_K",
    "Q6_K": "Q4_K",
    "IQ4_NL": "Q4_0",
    "IQ4_XS": "Q4_K",
}
_FALLBACK_QUANTS = ("Q4_0", "Q8_0", "F16")
_FFN_KINDS = {
    SubLayerKind.DENSE_FFN,
    SubLayerKind.MOE_ROUTER,
    SubLayerKind.ROUTED_EXPERTS,
    SubLayerKind.SHARED_EXPERTS,
}


_SHAPE_BY_KIND = {
    SubLayerKind.ROUTED_EXPERTS: KernelShape.MOE,
    SubLayerKind.OUTPUT_HEAD: KernelShape.HEAD,
    SubLayerKind.TOKEN_EMBEDDING: KernelShape.HEAD,  # a tied head multiplies by the embedding
}


class Where(str, Enum):
    """Where a sub-layer's weights live and where it runs."""

    CPU = "cpu"  # in system RAM, computed by the CPU
    GPU = "gpu"  # resident in VRAM
    STREAMED = "streamed"  # in system RAM, copied to the GPU and computed there every step


@dataclass(frozen=True)
class Placement:
    """Where each sub-layer goes; sub-layers not listed go to `default`."""

    default: Where = Where.CPU
    by_sublayer: dict[tuple[int | None, SubLayerKind], Where] = field(default_factory=dict)
    # staging slots streamed weights are uploaded ahead through (engine.llama.prefetch); 0: serial
    prefetch_slots: int = 0

    @property
    def overlaps_uploads(self) -> bool:
        return self.prefetch_slots >= 2

    def where(self, sub: SubLayer) -> Where:
        return self.by_sublayer.get((sub.block, sub.kind), self.default)


ALL_CPU = Placement()


@dataclass(frozen=True)
class SubLayerCost:
    kind: SubLayerKind
    block: int | None
    where: Where
    seconds: float
    compute_s: float
    memory_s: float
    transfer_s: float


@dataclass(frozen=True)
class StepPrediction:
    """Predicted time of one llama_decode step and where it goes."""

    n_tokens: int
    threads: int
    seconds: float
    overhead_s: float
    transfer_s: float
    by_kind: dict[SubLayerKind, float]
    by_device: dict[Where, float]

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.seconds


class CostModel:
    """Roofline predictions for one profile."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._curves: dict[tuple[Device, KernelShape, str, int], list[tuple[int, float]]] = {}
        for point in profile.cpu_kernels + (profile.gpu.kernels if profile.gpu else ()):
            key = (point.device, point.shape, point.quant, point.threads)
            self._curves.setdefault(key, []).append((point.n_tokens, self._gflops(point)))
        for curve in self._curves.values():
            curve.sort()
        if not self._curves:
            raise ValueError("the profile has no kernel measurements")
        self._gflops_memo: dict[tuple[Device, KernelShape, str, int, int], float] = {}

    # --- kernels ---

    def kernel_gflops(
        self, device: Device, shape: KernelShape, quant: str, threads: int, n_tokens: int
    ) -> float:
        """Measured throughput at the nearest quant and thread count, interpolated in tokens.

        Memoised: a plan asks the same few questions tens of thousands of times.
        """
        key = (device, shape, quant, threads, n_tokens)
        if key not in self._gflops_memo:
            self._gflops_memo[key] = self._kernel_gflops(device, shape, quant, threads, n_tokens)
        return self._gflops_memo[key]

    def _kernel_gflops(
        self, device: Device, shape: KernelShape, quant: str, threads: int, n_tokens: int
    ) -> float:
        if not any(d is device and s is shape for (d, s, _q, _t) in self._curves):
            shape = KernelShape.DENSE  # not measured: treat the matrices as dense blocks
        quant = self._measured_quant(device, shape, quant)
        threads = self._measured_threads(device, shape, quant, threads)
        return _interpolate_log(self._curves[(device, shape, quant, threads)], n_tokens)

    def stream_seconds(self, n_bytes: int, pinned: bool = True) -> float:
        """Time to copy n_bytes from system RAM to VRAM."""
        gpu = self._require_gpu()
        gbps = gpu.h2d_pinned_gbps if pinned else gpu.h2d_pageable_gbps
        return n_bytes / (gbps * 1e9)

    # --- sub-layers ---

    def sublayer_cost(
        self,
        sub: SubLayer,
        where: Where,
        threads: int,
        n_tokens: int,
        expert_share: float = 1.0,
        copies_running: bool = False,
        overlapped: bool = False,
    ) -> SubLayerCost:
        """Time of one sub-layer for n_tokens tokens on the device `where` says
        (`overlapped`: a streamed one's uploads run ahead of its compute)."""
        device = Device.CPU if where is Where.CPU else Device.GPU
        shape = _SHAPE_BY_KIND.get(sub.kind, KernelShape.DENSE)
        active = expert_share if sub.kind is SubLayerKind.ROUTED_EXPERTS else 1.0
        flops = 2.0 * sub.n_params * active * n_tokens
        touched = sub.n_bytes * _share_touched(active, n_tokens)
        gflops = self.kernel_gflops(device, shape, _main_quant(sub), threads, n_tokens)
        if device is Device.CPU and copies_running and self.profile.gpu:
            gflops *= self.profile.gpu.cpu_derate_under_copy
        compute_s = flops / (gflops * 1e9)
        memory_s = touched / (self._bandwidth_gbps(device) * 1e9)
        transfer_s = self.stream_seconds(sub.n_bytes) if where is Where.STREAMED else 0.0
        busy_s = max(compute_s, memory_s)
        if overlapped and transfer_s:
            seconds = overlapped_seconds(sub.kind, busy_s, transfer_s)
        else:
            seconds = busy_s + transfer_s
        return SubLayerCost(sub.kind, sub.block, where, seconds, compute_s, memory_s, transfer_s)

    def attention_seconds(
        self, inventory: ModelInventory, block: BlockInventory, n_tokens: int, n_past: int,
        device: Device,
    ) -> float:  # fmt: skip
        """What attending over the cached context adds, from the measured context curves.

        Cost grows with the tokens in the step, the context each one sees (causal:
        on average n_past + (n_tokens - 1) / 2) and the number of query heads.
        """
        points = [p for p in self._attention_points(device) if p.n_tokens <= max(n_tokens, 1)]
        if not points:
            points = self._attention_points(device)
        if not points:
            return 0.0
        batch = max(p.n_tokens for p in points)
        slope = statistics.median(
            p.seconds_per_layer / (p.n_tokens * p.n_ctx * p.n_head)
            for p in points
            if p.n_tokens == batch
        )
        context = n_past + (n_tokens - 1) / 2
        if block.sliding_window:
            context = min(context, block.sliding_window)
        return slope * n_tokens * context * (inventory.n_head or 1)

    def expert_overhead_s(self, inventory: ModelInventory, where: Where, n_tokens: int) -> float:
        """Fixed cost of the routed experts one block runs for n_tokens tokens.

        MUL_MAT_ID runs one matrix product per expert the step's tokens chose, and
        at a few tokens an expert's small matrices cost their launch (GPU) or their
        thread start and barriers (CPU) more than their bytes: the roofline alone
        predicted an RTX 5090 decoding Qwen3-30B-A3B at 3/4 of its bandwidth, where
        llama.cpp reaches far less. Each expert touched costs the profile's figure.
        """
        device = Device.CPU if where is Where.CPU else Device.GPU
        per_expert = self.profile.expert_overhead_s.get(device.value, 0.0)
        if not per_expert or not inventory.expert_count:
            return 0.0
        touched = _share_touched(_expert_share(inventory), n_tokens)
        return per_expert * inventory.expert_count * touched

    def _attention_points(self, device: Device) -> list[AttentionPoint]:
        source = self.profile.cpu_attention if device is Device.CPU else ()
        if device is Device.GPU and self.profile.gpu:
            source = self.profile.gpu.attention
        return [p for p in source if p.n_ctx > 0 and p.seconds_per_layer > 0]

    # --- whole steps ---

    def predict_step(
        self,
        inventory: ModelInventory,
        n_tokens: int,
        threads: int,
        n_outputs: int = 1,
        n_past: int = 0,
        placement: Placement = ALL_CPU,
    ) -> StepPrediction:
        """Time of one llama_decode of n_tokens after n_past cached ones, logits for n_outputs."""
        costs = self._block_costs(inventory, n_tokens, threads, n_outputs, n_past, placement)
        costs += self._global_costs(inventory, n_tokens, threads, n_outputs, placement)
        overhead = self._overhead_s(inventory, threads, placement)
        by_kind: dict[SubLayerKind, float] = defaultdict(float)
        by_device: dict[Where, float] = defaultdict(float)
        for cost in costs:
            by_kind[cost.kind] += cost.seconds
            by_device[cost.where] += cost.seconds
        return StepPrediction(
            n_tokens=n_tokens,
            threads=threads,
            seconds=sum(c.seconds for c in costs) + overhead,
            overhead_s=overhead,
            transfer_s=sum(c.transfer_s for c in costs),
            by_kind=dict(by_kind),
            by_device=dict(by_device),
        )

    def _block_costs(
        self, inventory: ModelInventory, n_tokens: int, threads: int, n_outputs: int,
        n_past: int, placement: Placement,
    ) -> list[SubLayerCost]:  # fmt: skip
        expert_share = _expert_share(inventory)
        copies = any(placement.where(s) is Where.STREAMED for s in inventory.all_sublayers())
        overlap = placement.overlaps_uploads
        last = inventory.blocks[-1].index if inventory.blocks else None
        costs = []
        first_upload = overlap
        for block in inventory.blocks:
            for sub in block.sublayers:
                rows = n_outputs if block.index == last and sub.kind in _FFN_KINDS else n_tokens
                where = placement.where(sub)
                cost = self.sublayer_cost(sub, where, threads, rows, expert_share, copies, overlap)
                if first_upload and where is Where.STREAMED:
                    # nothing computes before the step's first upload: it is not hidden
                    cost = _plus(cost, self.stream_seconds(sub.slot_bytes))
                    first_upload = False
                if sub.kind is SubLayerKind.ATTENTION:
                    device = Device.CPU if where is Where.CPU else Device.GPU
                    extra = self.attention_seconds(inventory, block, n_tokens, n_past, device)
                    cost = _plus(cost, extra)
                if sub.kind is SubLayerKind.ROUTED_EXPERTS:
                    cost = _plus(cost, self.expert_overhead_s(inventory, where, rows))
                costs.append(cost)
        return costs

    def _global_costs(
        self, inventory: ModelInventory, n_tokens: int, threads: int, n_outputs: int,
        placement: Placement,
    ) -> list[SubLayerCost]:  # fmt: skip
        """The output head for the rows whose logits are wanted; embedding lookups are free."""
        head = next((s for s in inventory.globals if s.kind is SubLayerKind.OUTPUT_HEAD), None)
        if head is None:  # tied: the head multiplies by the token embedding
            head = next(
                (s for s in inventory.globals if s.kind is SubLayerKind.TOKEN_EMBEDDING), None
            )
        if head is None:
            return []
        where = placement.where(head)
        cost = self.sublayer_cost(
            head, where, threads, n_outputs, overlapped=placement.overlaps_uploads
        )
        return [replace(cost, kind=SubLayerKind.OUTPUT_HEAD)]

    def _overhead_s(self, inventory: ModelInventory, threads: int, placement: Placement) -> float:
        call = _nearest(self.profile.cpu_call_overhead_s, threads)
        per_block = _nearest(self.profile.cpu_layer_overhead_s, threads)
        on_cpu = sum(
            1 for b in inventory.blocks if any(placement.where(s) is Where.CPU for s in b.sublayers)
        )
        gpu = self.profile.gpu
        if gpu is None or all(placement.where(s) is Where.CPU for s in inventory.all_sublayers()):
            return call + per_block * on_cpu
        on_gpu = sum(
            1
            for b in inventory.blocks
            if any(placement.where(s) is not Where.CPU for s in b.sublayers)
        )
        return call + per_block * on_cpu + gpu.step_overhead_s + gpu.layer_overhead_s * on_gpu

    # --- lookups ---

    def _gflops(self, point: KernelPoint) -> float:
        """Throughput net of the fixed per-block cost, which the cost model adds separately."""
        fixed = 0.0
        if point.device is Device.CPU:
            fixed = _nearest(self.profile.cpu_layer_overhead_s, point.threads)
        elif self.profile.gpu is not None:
            fixed = self.profile.gpu.layer_overhead_s
        seconds = max(point.seconds_per_layer - fixed, point.seconds_per_layer * 0.5)
        return point.flops_per_layer / seconds / 1e9

    def _measured_quant(self, device: Device, shape: KernelShape, quant: str) -> str:
        measured = {q for (d, s, q, _t) in self._curves if d is device and s is shape}
        for candidate in (quant, QUANT_FAMILY.get(quant, quant), *_FALLBACK_QUANTS):
            if candidate in measured:
                return candidate
        if not measured:
            raise ValueError(f"the profile has no {device.value.upper()} measurements")
        return sorted(measured)[0]

    def _measured_threads(
        self, device: Device, shape: KernelShape, quant: str, threads: int
    ) -> int:
        counts = sorted(t for (d, s, q, t) in self._curves if (d, s, q) == (device, shape, quant))
        at_most = [t for t in counts if t <= threads]
        return at_most[-1] if at_most else counts[0]

    def _bandwidth_gbps(self, device: Device) -> float:
        if device is Device.CPU:
            return self.profile.dram_read_gbps
        return self._require_gpu().memory_gbps

    def _require_gpu(self) -> GpuProfile:
        if self.profile.gpu is None:
            raise ValueError("the profile has no GPU; it cannot place sub-layers on one")
        return self.profile.gpu


def overlapped_seconds(kind: SubLayerKind, busy_s: float, transfer_s: float) -> float:
    """A streamed sub-layer's time when its uploads run ahead of the compute.

    Each weight is a split of its own, uploaded while the splits before it compute, so
    a dense sub-layer costs the longer of its upload and its compute. An expert bank's
    three matrices (gate, up, down) carry only the experts the router chose, known
    when the router has run: the first matrix's upload waits in full, the other two
    overlap the compute of the ones before them.
    """
    if kind is SubLayerKind.ROUTED_EXPERTS:
        return (busy_s + transfer_s) / 3 + 2 * max(busy_s, transfer_s) / 3
    return max(busy_s, transfer_s)


def _main_quant(sub: SubLayer) -> str:
    """The quant of a sub-layer's weight matrices (norms are F32 and tiny)."""
    matrices = [q for q in sub.quant_types if q != "F32"]
    return matrices[0] if matrices else "F32"


def _expert_share(inventory: ModelInventory) -> float:
    if not inventory.expert_count:
        return 1.0
    return inventory.expert_used_count / inventory.expert_count


def _share_touched(active: float, n_tokens: int) -> float:
    """Share of an expert bank n_tokens tokens touch when each uses `active` of it at random."""
    if active >= 1.0:
        return 1.0
    return 1.0 - (1.0 - active) ** n_tokens


def _interpolate_log(curve: list[tuple[int, float]], n_tokens: int) -> float:
    """Log-log interpolation over measured token counts; flat beyond the ends."""
    if n_tokens <= curve[0][0]:
        return curve[0][1]
    if n_tokens >= curve[-1][0]:
        return curve[-1][1]
    for (x0, y0), (x1, y1) in zip(curve, curve[1:], strict=False):
        if x0 <= n_tokens <= x1:
            t = (math.log(n_tokens) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0)))
    raise AssertionError("unreachable")


def _nearest(by_threads: dict[int, float], threads: int) -> float:
    if not by_threads:
        return 0.0
    return by_threads[min(by_threads, key=lambda t: (abs(t - threads), t))]


def _plus(cost: SubLayerCost, seconds: float) -> SubLayerCost:
    return replace(cost, seconds=cost.seconds + seconds, compute_s=cost.compute_s + seconds)
