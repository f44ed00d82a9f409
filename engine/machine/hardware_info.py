"""The machine as plain values: CPU, memory, GPUs; its fingerprint keys the stored profile."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from engine.known_fields import known_fields

GIB = 1024**3


def _json_ready_dict(value: dict[str, Any]) -> dict[str, Any]:
    return {key: _json_ready(item) for key, item in value.items()}


def _json_ready(value: Any) -> Any:
    """Tuples become lists, recursively, so to_dict() equals its own JSON round trip."""
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(item) for item in value]
    return value


@dataclass(frozen=True)
class CpuInfo:
    """The CPU as llama.cpp sees it: model name, core counts, relevant instruction sets."""

    model: str
    physical_cores: int
    logical_cores: int
    flags: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return _json_ready_dict(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CpuInfo:
        known = known_fields(cls, data)
        return cls(**{**known, "flags": tuple(known.get("flags", ()))})


@dataclass(frozen=True)
class MemoryInfo:
    """System RAM in bytes; `available_bytes` is what can be used without swapping."""

    total_bytes: int
    available_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryInfo:
        return cls(**known_fields(cls, data))


@dataclass(frozen=True)
class GpuInfo:
    """One GPU: NVML's figures for an NVIDIA GPU, else what ggml reports.

    A field nobody could read is None (or 0): ggml knows no PCIe link, no UUID and
    nothing of other processes, so for a GPU only ggml sees those stay None / ""
    and `other_processes_bytes` is 0 with `other_processes_known` False.

    `ggml_device` is the device llama.cpp runs on ("CUDA0", "Vulkan0"); None when
    this llama.cpp build has no backend for the GPU (an NVIDIA GPU under a CPU-only
    build: nothing can be offloaded to it), and in data stored before it was probed.

    An `integrated` GPU has no memory of its own: its `vram_*` figures are system
    RAM, the same bytes MemoryInfo counts. Whoever adds RAM and VRAM up (the
    planner, a budget) must count them once.
    """

    index: int  # position in probe_gpus()'s list: llama.cpp's device order, 0 its main GPU
    name: str
    uuid: str
    vram_total_bytes: int
    vram_free_bytes: int
    vram_used_bytes: int
    other_processes_bytes: int
    pcie_generation_current: int | None
    pcie_generation_max: int | None
    pcie_width_current: int | None
    pcie_width_max: int | None
    compute_capability: tuple[int, int] | None
    # Defaults, so profiles stored before ggml devices were probed (all NVML, CUDA) load.
    backend: str = "CUDA"  # ggml backend registry name: "CUDA", "Vulkan", "Metal", ...
    ggml_device: str | None = None
    integrated: bool = False
    other_processes_known: bool = True  # False: the backend cannot say who uses the memory

    def to_dict(self) -> dict[str, Any]:
        return _json_ready_dict(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuInfo:
        known = known_fields(cls, data)
        capability = known.get("compute_capability")
        return cls(**{**known, "compute_capability": tuple(capability) if capability else None})


@dataclass(frozen=True)
class HardwareInfo:
    """The whole machine; `fingerprint()` keys the stored profile."""

    cpu: CpuInfo
    memory: MemoryInfo
    gpus: tuple[GpuInfo, ...]
    gpu_reason: str | None
    driver_version: str | None
    cuda_driver_version: str | None
    os: str
    llama_build: str
    # the backend modules llama.cpp loaded or skipped, and why (engine.llama.backends);
    # the llama_build above already names what a profile depends on
    backends: tuple[str, ...] = ()

    def fingerprint(self) -> str:
        """Hash of what changes a profile's measurements; drifting quantities stay out."""
        measured = {
            "cpu_model": self.cpu.model,
            "physical_cores": self.cpu.physical_cores,
            "logical_cores": self.cpu.logical_cores,
            "cpu_flags": list(self.cpu.flags),
            "ram_gib": round(self.memory.total_bytes / GIB),
            "gpus": [_gpu_identity(gpu) for gpu in self.gpus],
            "driver_version": self.driver_version,
            "llama_build": self.llama_build,
        }
        canonical = json.dumps(measured, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return _json_ready_dict(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HardwareInfo:
        known = known_fields(cls, data)
        return cls(
            **{
                **known,
                "cpu": CpuInfo.from_dict(known["cpu"]),
                "memory": MemoryInfo.from_dict(known["memory"]),
                "gpus": tuple(GpuInfo.from_dict(gpu) for gpu in known.get("gpus", ())),
                "backends": tuple(known.get("backends", ())),
            }
        )


def _gpu_identity(gpu: GpuInfo) -> list[Any]:
    """A GPU driven through another backend runs other kernels: its figures differ.

    CUDA, the only backend before backends were recorded, adds nothing, so the
    fingerprints of stored and shipped (described) profiles stay what they were.
    """
    identity: list[Any] = [gpu.name, gpu.vram_total_bytes, gpu.pcie_generation_max]
    identity.append(gpu.pcie_width_max)
    return identity if gpu.backend == "CUDA" else [*identity, gpu.backend]
