"""What machine ShardChat runs on: CPU, memory, GPUs, driver and llama.cpp build.

Every plan the planner makes depends on the machine: how fast the CPU's kernels
are, how much VRAM is free, how quickly weights cross the PCIe link. The
profiler measures those speeds once and stores them keyed by a fingerprint of
this probe; when the fingerprint changes (new GPU, more RAM, another driver or
llama.cpp build) the old profile no longer describes the machine and is
re-measured. Quantities that drift while the app runs (free memory, free VRAM,
the PCIe link's current power state) are reported but kept out of the
fingerprint.

GPUs come from two sources. NVML knows NVIDIA GPUs in detail (PCIe link, VRAM
held by other processes, driver); ggml's device list knows what this llama.cpp
build can actually offload to, whatever the vendor (CUDA, Vulkan on AMD, Intel
or NVIDIA, Metal, ...). A GPU both see is reported once, with NVML's details
and ggml's device name.

The probe never raises: a machine without a GPU driver is a normal machine,
and its missing GPU comes back as an empty tuple with a one-line reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import psutil

from engine.known_fields import known_fields
from engine.llama.ggml_devices import DeviceType, GgmlDevice, probe_devices, system_info

logger = logging.getLogger(__name__)

GIB = 1024**3
CPUINFO_PATH = Path("/proc/cpuinfo")

# /proc/cpuinfo flag name -> the name we report; only what llama.cpp's kernels care about.
# fmt: off
_SAME_NAME_FLAGS = (
    "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2",
    "avx512f", "avx512bw", "avx512vl", "avx512vbmi", "avx512_vnni", "avx512_bf16",
    "avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
    "sve", "sve2", "i8mm", "sme",
)
# fmt: on
_RELEVANT_CPU_FLAGS: dict[str, str] = {
    **{name: name for name in _SAME_NAME_FLAGS},
    "pni": "sse3",
    "asimd": "neon",
    "asimddp": "dotprod",
}
_MACOS_ARM64_FLAGS = ("dotprod", "neon")

# NVML return codes (nvml.h); stable across driver versions.
_NVML_ERROR_DRIVER_NOT_LOADED = 9
_NVML_ERROR_LIBRARY_NOT_FOUND = 12
_INIT_FAILURE_REASONS = {
    _NVML_ERROR_LIBRARY_NOT_FOUND: "NVIDIA driver not found (libnvidia-ml)",
    _NVML_ERROR_DRIVER_NOT_LOADED: "NVIDIA driver not loaded",
}

D = TypeVar("D")
NO_GPU_FOUND = "no GPU found by NVML or ggml"  # how gpu_reason starts when both looked
GgmlProbe = Callable[[], tuple[tuple[GgmlDevice, ...], str | None]]


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


# --- CPU -------------------------------------------------------------------------------


def parse_cpuinfo(text: str) -> dict[str, str]:
    """The first value of each key in /proc/cpuinfo text (the first CPU's block)."""
    entries: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            entries.setdefault(key.strip(), value.strip())
    return entries


def relevant_cpu_flags(raw_flags: str) -> tuple[str, ...]:
    """The llama.cpp-relevant subset of a cpuinfo flags/Features line, lower-case, sorted."""
    present = {_RELEVANT_CPU_FLAGS.get(flag) for flag in raw_flags.lower().split()}
    return tuple(sorted(flag for flag in present if flag))


def _read_cpuinfo() -> dict[str, str]:
    try:
        return parse_cpuinfo(CPUINFO_PATH.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return {}


def _macos_cpu_model() -> str:
    try:
        result = subprocess.run(
            ["sysctl", "-n", "machdep.cpu.brand_string"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout.strip()


def _cpu_model(cpuinfo: dict[str, str]) -> str:
    for key in ("model name", "Hardware", "Processor", "cpu model"):
        if cpuinfo.get(key):
            return cpuinfo[key]
    if platform.system() == "Darwin":
        model = _macos_cpu_model()
        if model:
            return model
    return platform.processor() or "unknown"


def _cpu_flags(cpuinfo: dict[str, str]) -> tuple[str, ...]:
    raw = cpuinfo.get("flags") or cpuinfo.get("Features")
    if raw:
        return relevant_cpu_flags(raw)
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        return _MACOS_ARM64_FLAGS
    return ()


def probe_cpu() -> CpuInfo:
    """CPU model, core counts and instruction-set flags of this machine."""
    cpuinfo = _read_cpuinfo()
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or logical
    return CpuInfo(
        model=_cpu_model(cpuinfo),
        physical_cores=physical,
        logical_cores=max(logical, physical),
        flags=_cpu_flags(cpuinfo),
    )


def probe_memory() -> MemoryInfo:
    """Total and currently available system RAM."""
    memory = psutil.virtual_memory()
    return MemoryInfo(total_bytes=int(memory.total), available_bytes=int(memory.available))


# --- NVIDIA GPUs through NVML ----------------------------------------------------------


def _text(value: str | bytes) -> str:
    """NVML strings are bytes in older nvidia-ml-py releases, str in newer ones."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _query(nvml: Any, function: str, *args: Any, default: D) -> Any | D:
    """One NVML query by name; a failure (not supported, lost GPU, old binding) gives `default`."""
    try:
        return getattr(nvml, function)(*args)
    except Exception as exc:  # NVMLError subclasses, or AttributeError from an old pynvml
        logger.debug("NVML %s failed: %s", function, exc)
        return default


def _cuda_version_text(version: int | None) -> str | None:
    """NVML encodes CUDA 12.6 as 12060."""
    if not version:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def _other_processes_bytes(nvml: Any, handle: Any) -> int:
    """VRAM held by other processes; a pid in both compute and graphics lists counts once."""
    by_pid: dict[int, int] = {}
    for function in (
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
    ):
        for process in _query(nvml, function, handle, default=[]):
            used = getattr(process, "usedGpuMemory", None) or 0  # None on Windows WDDM
            by_pid[process.pid] = max(by_pid.get(process.pid, 0), used)
    by_pid.pop(os.getpid(), None)
    return sum(by_pid.values())


class _NvidiaGpu(NamedTuple):
    """An NVML GPU and its PCI address, by which ggml's devices are matched to it."""

    info: GpuInfo
    pci: tuple[int, int, int, int] | None


def pci_address(bus_id: str | bytes | None) -> tuple[int, int, int, int] | None:
    """(domain, bus, device, function) of "0000:01:00.0" (ggml) or "00000000:01:00.0" (NVML)."""
    if not bus_id:
        return None
    domain, _, rest = _text(bus_id).strip().lower().partition(":")
    bus, _, rest = rest.partition(":")
    device, _, function = rest.partition(".")
    try:
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:  # a virtual device ("...-v1") or a format we do not know
        return None


def _probe_gpu(nvml: Any, index: int) -> _NvidiaGpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def ask(function: str, default: Any = None) -> Any:
        return _query(nvml, f"nvmlDevice{function}", handle, default=default)

    memory = ask("GetMemoryInfo")
    capability = ask("GetCudaComputeCapability")
    pci = ask("GetPciInfo")
    info = GpuInfo(
        index=index,
        name=_text(ask("GetName", "unknown")),
        uuid=_text(ask("GetUUID", "")),
        vram_total_bytes=int(memory.total) if memory else 0,
        vram_free_bytes=int(memory.free) if memory else 0,
        vram_used_bytes=int(memory.used) if memory else 0,
        other_processes_bytes=_other_processes_bytes(nvml, handle),
        pcie_generation_current=ask("GetCurrPcieLinkGeneration"),
        pcie_generation_max=ask("GetMaxPcieLinkGeneration"),
        pcie_width_current=ask("GetCurrPcieLinkWidth"),
        pcie_width_max=ask("GetMaxPcieLinkWidth"),
        compute_capability=tuple(capability) if capability else None,
    )
    return _NvidiaGpu(info, pci_address(getattr(pci, "busId", None)))


def _describe(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _init_failure_reason(exc: Exception) -> str:
    code = getattr(exc, "value", None)
    reason = _INIT_FAILURE_REASONS.get(code) if isinstance(code, int) else None
    return reason or f"NVML error: {_describe(exc)}"


_NvmlProbe = tuple[list[_NvidiaGpu], str | None, str | None, str | None]


def _read_devices(nvml: Any) -> _NvmlProbe:
    driver = _query(nvml, "nvmlSystemGetDriverVersion", default=None)
    driver_version = _text(driver) if driver else None
    cuda_version = _cuda_version_text(_query(nvml, "nvmlSystemGetCudaDriverVersion", default=None))
    gpus = [_probe_gpu(nvml, index) for index in range(nvml.nvmlDeviceGetCount())]
    return gpus, None if gpus else "no NVIDIA GPU", driver_version, cuda_version


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception as exc:
        logger.debug("nvmlShutdown failed: %s", exc)


def _probe_nvml(nvml: Any | None) -> _NvmlProbe:
    """(NVIDIA GPUs, reason they are missing, driver version, CUDA driver version)."""
    if nvml is None:
        try:
            import pynvml
        except ImportError as exc:
            return [], f"nvidia-ml-py is not installed ({exc})", None, None
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return [], _init_failure_reason(exc), None, None
    try:
        return _read_devices(nvml)
    except Exception as exc:
        return [], f"NVML error: {_describe(exc)}", None, None
    finally:
        _shutdown(nvml)


# --- GPUs ggml sees, and the two lists combined ---------------------------------------


def _same_gpu_candidates(device: GgmlDevice, nvidia: Sequence[_NvidiaGpu]) -> list[int]:
    """NVML GPUs `device` may be: by PCI address where both know it, else by name.

    CUDA's and Vulkan's device names are the marketing name NVML reports too
    ("NVIDIA GeForce RTX 4060 Laptop GPU"); two GPUs whose PCI addresses differ
    are different GPUs whatever their names.
    """
    address = pci_address(device.device_id)
    by_address = [i for i, gpu in enumerate(nvidia) if address and gpu.pci == address]
    if by_address:
        return by_address
    name = device.description.strip().casefold()
    return [
        i
        for i, gpu in enumerate(nvidia)
        if (address is None or gpu.pci is None) and gpu.info.name.strip().casefold() == name
    ]


def _from_ggml(device: GgmlDevice, index: int) -> GpuInfo:
    """A GPU only ggml sees: its memory figures and nothing ggml cannot know."""
    total, free = device.memory_total_bytes, device.memory_free_bytes
    return GpuInfo(
        index=index,
        name=device.description or device.name,
        uuid="",
        vram_total_bytes=total,
        vram_free_bytes=free,
        vram_used_bytes=max(0, total - free),
        other_processes_bytes=0,  # ggml's "used" is everyone's, ours included
        pcie_generation_current=None,
        pcie_generation_max=None,
        pcie_width_current=None,
        pcie_width_max=None,
        compute_capability=None,
        backend=device.backend,
        ggml_device=device.name,
        integrated=device.type is DeviceType.IGPU,
        other_processes_known=False,
    )


def _with_ggml(gpu: GpuInfo, device: GgmlDevice, index: int) -> GpuInfo:
    return dataclasses.replace(
        gpu,
        index=index,
        backend=device.backend,
        ggml_device=device.name,
        integrated=device.type is DeviceType.IGPU,
    )


def _combined(nvidia: Sequence[_NvidiaGpu], devices: Sequence[GgmlDevice]) -> tuple[GpuInfo, ...]:
    """One GpuInfo per physical GPU, in the order llama.cpp would use them.

    ggml's GPU devices come first, discrete before integrated, in registry order
    (llama.cpp's own: its main GPU is the first discrete one, and it uses
    integrated GPUs only when there is no discrete one); then NVIDIA GPUs this
    build has no backend for. A GPU seen through two backends (CUDA0 and Vulkan0
    in a build with both) is reported once, under the first, as llama.cpp does
    when their PCI addresses agree. `index` is the position in this list.
    """
    gpu_devices = sorted((d for d in devices if d.is_gpu), key=lambda d: d.type is DeviceType.IGPU)
    gpus: list[GpuInfo] = []
    matched: set[int] = set()  # NVML GPUs already listed
    seen_ids: set[str] = set()
    for device in gpu_devices:
        if device.device_id in seen_ids:
            continue  # llama.cpp, too, skips a device whose PCI id it already uses
        if device.device_id:
            seen_ids.add(device.device_id)
        gpu = _listed_once(device, nvidia, matched, len(gpus))
        if gpu is not None:
            gpus.append(gpu)
    for i, nvidia_gpu in enumerate(nvidia):
        if i not in matched:
            gpus.append(dataclasses.replace(nvidia_gpu.info, index=len(gpus)))
    return tuple(gpus)


def _listed_once(
    device: GgmlDevice, nvidia: Sequence[_NvidiaGpu], matched: set[int], index: int
) -> GpuInfo | None:
    """`device` with NVML's details if it is an NVIDIA GPU; None if that GPU is listed already."""
    candidates = _same_gpu_candidates(device, nvidia)
    unmatched = [i for i in candidates if i not in matched]
    if not candidates:
        return _from_ggml(device, index)
    if not unmatched:
        return None  # seen again through another backend (CUDA0, then Vulkan0)
    matched.add(unmatched[0])
    return _with_ggml(nvidia[unmatched[0]].info, device, index)


def _ggml_reason(devices: Sequence[GgmlDevice], reason: str | None) -> str:
    if reason:
        return reason
    return f"no GPU device, only {', '.join(d.name for d in devices)}"


def probe_gpus(
    nvml: Any | None = None,
    ggml: GgmlProbe = probe_devices,
) -> tuple[tuple[GpuInfo, ...], str | None, str | None, str | None]:
    """(gpus, reason they are missing, driver version, CUDA driver version); never raises.

    `nvml` defaults to the pynvml module and `ggml` to ggml's real device list;
    tests pass fakes of a described machine. The driver versions are NVIDIA's
    (NVML); a GPU only ggml sees has none here.
    """
    nvidia, nvml_reason, driver, cuda = _probe_nvml(nvml)
    try:
        devices, ggml_failure = ggml()
    except Exception as exc:  # an injected list may fail; the real one never raises
        devices, ggml_failure = (), f"ggml error: {_describe(exc)}"
    gpus = _combined(nvidia, devices)
    if gpus:
        return gpus, None, driver, cuda
    ggml_reason = _ggml_reason(devices, ggml_failure)
    return (
        (),
        f"{NO_GPU_FOUND} (NVML: {nvml_reason}; ggml: {ggml_reason})",
        driver,
        cuda,
    )


# --- llama.cpp build -------------------------------------------------------------------


def compact_system_info(text: str) -> str:
    """Shorten llama_print_system_info(): "CPU : AVX = 1 | F16C = 0 | ..." -> "CPU: AVX".

    Features set to 1 keep their name, those set to 0 are dropped, other values
    (CUDA ARCHS = 890) are kept as NAME=VALUE; each backend becomes one "; " part.
    """
    groups: list[tuple[str, list[str]]] = []
    for item in text.split("|"):
        backend, sep, feature = item.partition(" : ")
        if sep:
            groups.append((backend.strip(), []))
        else:
            feature = backend
        if not groups:
            groups.append(("", []))
        _add_feature(groups[-1][1], feature)
    parts = [f"{name}: {' '.join(items)}".strip(": ") for name, items in groups]
    return "; ".join(part for part in parts if part)


def _add_feature(items: list[str], feature: str) -> None:
    key, _, value = (part.strip() for part in feature.partition("="))
    if not key or value == "0":
        return
    items.append(key if value in ("", "1") else f"{key}={value}")


def llama_build_id() -> str:
    """llama-cpp-python's version and the backends and features its llama.cpp was built with."""
    try:
        import llama_cpp
    except Exception as exc:  # a broken native library raises OSError/RuntimeError on import
        return f"llama-cpp-python unavailable ({type(exc).__name__})"
    version = getattr(llama_cpp, "__version__", "unknown")
    return f"llama-cpp-python {version}; {compact_system_info(system_info())}".rstrip("; ")


# --- the whole machine -----------------------------------------------------------------


def _gpu_text(gpu: GpuInfo) -> str:
    device = gpu.ggml_device or "no llama.cpp device"
    memory = "shared system RAM" if gpu.integrated else "VRAM"
    return f"{gpu.name} ({gpu.backend} {device}, {gpu.vram_total_bytes / GIB:.1f} GiB {memory})"


def probe_hardware() -> HardwareInfo:
    """Probe CPU, memory, GPUs and the llama.cpp build; never raises on a GPU-less machine."""
    gpus, reason, driver, cuda = probe_gpus()
    info = HardwareInfo(
        cpu=probe_cpu(),
        memory=probe_memory(),
        gpus=gpus,
        gpu_reason=reason,
        driver_version=driver,
        cuda_driver_version=cuda,
        os=platform.platform(),
        llama_build=llama_build_id(),
    )
    logger.info(
        "hardware %s: %s, %d/%d cores, %.1f GiB RAM, GPUs: %s",
        info.fingerprint(),
        info.cpu.model,
        info.cpu.physical_cores,
        info.cpu.logical_cores,
        info.memory.total_bytes / GIB,
        ", ".join(_gpu_text(gpu) for gpu in gpus) or reason,
    )
    for gpu in gpus:
        if gpu.integrated:
            logger.info(
                "GPU %d (%s) is integrated: its %.1f GiB are system RAM, not memory of its own",
                gpu.index,
                gpu.name,
                gpu.vram_total_bytes / GIB,
            )
    return info
