"""A machine's measured (or described) performance: what the cost model plans with.

A profile is plain data so it can be stored in SQLite, exported to JSON,
imported on another machine and compared. Every dataclass has `from_dict`
that ignores unknown keys, so a profile written by a newer ShardChat still
loads. Profiles of machines we do not have (an 8 GB laptop GPU, an RTX 5090
desktop) are *described* ones: figures taken from datasheets, marked as such.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from engine.known_fields import known_fields

PROFILE_SCHEMA_VERSION = 1


class ProfileMode(str, Enum):
    FAST = "fast"  # the first-launch wizard's run
    FULL = "full"
    SMOKE = "smoke"  # seconds: one thread count, one quant; checks that profiling works
    DESCRIBED = "described"  # datasheet-derived, never measured


class Device(str, Enum):
    CPU = "cpu"
    GPU = "gpu"


class KernelShape(str, Enum):
    """Which kind of transformer block a kernel figure was measured on."""

    DENSE = "dense"  # attention projections + dense FFN
    MOE = "moe"  # attention projections + router + routed expert bank
    HEAD = "head"  # the output head: a very tall matrix, one row per vocabulary entry


@dataclass(frozen=True)
class KernelPoint:
    """One block of a micro-model, timed by llama_decode at one quant, thread and token count."""

    device: Device
    shape: KernelShape
    quant: str
    threads: int
    n_tokens: int
    seconds_per_layer: float
    flops_per_layer: float  # for all n_tokens tokens (MoE: active experts only)
    bytes_per_layer: int  # weight bytes one block holds

    @property
    def gflops(self) -> float:
        return self.flops_per_layer / self.seconds_per_layer / 1e9

    @property
    def weight_gbps(self) -> float:
        """Weight bytes streamed per second: the bandwidth a bandwidth-bound step reaches."""
        return self.bytes_per_layer / self.seconds_per_layer / 1e9

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelPoint:
        known = known_fields(cls, data)
        known["device"] = Device(known["device"])
        known["shape"] = KernelShape(known["shape"])
        return cls(**known)


@dataclass(frozen=True)
class UnusableConfig:
    """A configuration whose child process crashed, hung or failed; the run went on."""

    config: str
    reason: str

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UnusableConfig:
        return cls(**known_fields(cls, data))


@dataclass(frozen=True)
class RepackResult:
    """Whether llama.cpp's CPU weight repacking (extra buffer types) works and pays off here."""

    works: bool
    speedup: float | None  # plain time / repacked time for Q4_0; > 1 means it pays off
    detail: str = ""

    @property
    def pays_off(self) -> bool:
        return self.works and (self.speedup or 0) > 1.02

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RepackResult:
        return cls(**known_fields(cls, data))


@dataclass(frozen=True)
class AttentionPoint:
    """What a context of n_ctx cached tokens adds to one block's time for an n_tokens step.

    Measured on a block with n_head query heads; at the sizes that matter the
    cost goes per head more than per FLOP, so the cost model scales by heads.
    """

    device: Device
    n_ctx: int
    n_tokens: int
    seconds_per_layer: float
    n_head: int

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttentionPoint:
        known = known_fields(cls, data)
        known["device"] = Device(known["device"])
        return cls(**known)


@dataclass(frozen=True)
class GpuProfile:
    """A GPU's figures and its link to the host, as measured through one ggml backend.

    `backend` and `ggml_device` say which llama.cpp device the figures are of: the
    same GPU runs other kernels under CUDA than under Vulkan. Their defaults are
    what every profile stored before they were recorded measured (CUDA).
    """

    name: str
    vram_total_bytes: int
    kernels: tuple[KernelPoint, ...]
    h2d_pinned_gbps: float
    h2d_pageable_gbps: float
    cpu_derate_under_copy: float  # CPU speed while host->device copies run, as a share of alone
    step_overhead_s: float  # per llama_decode call that uses the GPU
    memory_gbps: float  # VRAM bandwidth
    attention: tuple[AttentionPoint, ...] = ()
    backend: str = "CUDA"  # ggml backend registry name: "CUDA", "Vulkan", "Metal", ...
    ggml_device: str | None = None  # "CUDA0", "Vulkan0"; None: not recorded
    # the least VRAM a plan leaves free (driver and allocator slack outside llama.cpp's
    # buffers): engine.planning.vram_account.margin_floor_for picks it per device
    margin_floor_bytes: int = 128 * 1024 * 1024
    # per block computed on the GPU per step, besides its FLOPs and bytes: kernel
    # launches and synchronisation (0: not measured, as in profiles made before it was)
    layer_overhead_s: float = 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuProfile:
        known = known_fields(cls, data)
        known["kernels"] = tuple(KernelPoint.from_dict(k) for k in known.get("kernels", ()))
        known["attention"] = tuple(AttentionPoint.from_dict(a) for a in known.get("attention", ()))
        return cls(**known)


class Quietness(str, Enum):
    """How quiet the machine was while it was measured."""

    QUIET = "quiet"  # other programs left the processor to the profiler
    BUSY = "busy"  # some figures were measured beside other programs: usable, flagged
    TOO_BUSY = "too busy"  # other programs took so much that the figures cannot be trusted


@dataclass(frozen=True)
class StepLoad:
    """What other programs used while one profiling step ran (the attempt that was kept)."""

    step: str
    other_cpu_share: float  # of all logical CPUs, 0..1, the larger of just before and during
    attempts: int  # 1 unless the step was repeated because others disturbed it
    other_gpu_percent: float | None = None  # GPU utilisation just before; None: not known

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepLoad:
        return cls(**known_fields(cls, data))


@dataclass(frozen=True)
class MachineLoad:
    """How busy the machine was while the profile was measured, and what that makes of it.

    A profile measured beside other programs times llama.cpp's kernels slower
    than they run alone, and a plan made from it predicts too little (issue 29:
    0.9 tokens/s predicted, 21.8 measured). This record says so wherever the
    profile is shown, and a too-busy one is not stored as the machine's profile.
    """

    verdict: Quietness
    other_cpu_share: float  # mean over the kept steps, weighted by their time
    busiest_step: str  # the kept step others disturbed most ("" when none was measured)
    busiest_share: float
    steps_repeated: int  # extra attempts the run spent on disturbed steps
    steps: tuple[StepLoad, ...] = ()

    @property
    def trustworthy(self) -> bool:
        return self.verdict is not Quietness.TOO_BUSY

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MachineLoad:
        known = known_fields(cls, data)
        known["verdict"] = Quietness(known["verdict"])
        known["steps"] = tuple(StepLoad.from_dict(s) for s in known.get("steps", ()))
        return cls(**known)


@dataclass(frozen=True)
class Profile:
    """Everything measured about one machine with one llama.cpp build."""

    fingerprint: str
    llama_build: str
    mode: ProfileMode
    created_at: str  # ISO 8601, UTC
    duration_s: float
    physical_cores: int
    cpu_kernels: tuple[KernelPoint, ...]
    cpu_call_overhead_s: dict[int, float]  # threads -> fixed seconds of one llama_decode call
    cpu_layer_overhead_s: dict[int, float]  # threads -> fixed seconds each block adds to a call
    dram_read_gbps: float
    repack: RepackResult | None = None
    gpu: GpuProfile | None = None
    cpu_attention: tuple[AttentionPoint, ...] = ()
    hardware: dict[str, Any] = field(
        default_factory=dict
    )  # engine.machine.hardware.HardwareInfo.to_dict()
    unusable: tuple[UnusableConfig, ...] = ()
    description: str = ""
    schema_version: int = PROFILE_SCHEMA_VERSION
    # fixed seconds each routed expert a step runs adds per block, by device ("cpu", "gpu"):
    # MUL_MAT_ID's one product per expert, small matrices over many threads; empty: not
    # measured (every profile made before it was), and the cost model adds nothing
    expert_overhead_s: dict[str, float] = field(default_factory=dict)
    # how busy the machine was while measured; None: described, or stored before it was recorded
    machine_load: MachineLoad | None = None

    @property
    def is_described(self) -> bool:
        return self.mode is ProfileMode.DESCRIBED

    @property
    def thread_counts(self) -> tuple[int, ...]:
        return tuple(sorted({k.threads for k in self.cpu_kernels}))

    @property
    def quants(self) -> tuple[str, ...]:
        return tuple(sorted({k.quant for k in self.cpu_kernels}))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mode"] = self.mode.value
        for name in ("cpu_call_overhead_s", "cpu_layer_overhead_s"):
            data[name] = {str(k): v for k, v in getattr(self, name).items()}
        plain: dict[str, Any] = json.loads(json.dumps(data, default=_enum_value))
        return plain

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Profile:
        known = known_fields(cls, data)
        known["mode"] = ProfileMode(known["mode"])
        known["cpu_kernels"] = tuple(KernelPoint.from_dict(k) for k in known.get("cpu_kernels", ()))
        for name in ("cpu_call_overhead_s", "cpu_layer_overhead_s"):
            known[name] = {int(k): float(v) for k, v in known.get(name, {}).items()}
        known["cpu_attention"] = tuple(
            AttentionPoint.from_dict(a) for a in known.get("cpu_attention", ())
        )
        known["unusable"] = tuple(UnusableConfig.from_dict(u) for u in known.get("unusable", ()))
        if known.get("repack") is not None:
            known["repack"] = RepackResult.from_dict(known["repack"])
        if known.get("gpu") is not None:
            known["gpu"] = GpuProfile.from_dict(known["gpu"])
        if known.get("machine_load") is not None:
            known["machine_load"] = MachineLoad.from_dict(known["machine_load"])
        return cls(**known)

    @classmethod
    def from_json(cls, text: str) -> Profile:
        return cls.from_dict(json.loads(text))


def _enum_value(value: object) -> object:
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"cannot serialise {type(value).__name__}")
