"""The GPUs: NVIDIA ones through NVML in detail, every one llama.cpp can use through ggml.

NVML knows NVIDIA GPUs in detail (PCIe link, VRAM held by other processes,
driver); ggml's device list knows what this llama.cpp build can actually
offload to, whatever the vendor (CUDA, Vulkan on AMD, Intel or NVIDIA,
Metal, ...). A GPU both see is reported once, with NVML's details and ggml's
device name. The probe never raises: a missing GPU comes back as an empty
tuple with a one-line reason.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from engine.llama.ggml_devices import DeviceType, GgmlDevice, backend_report, probe_devices
from engine.machine.hardware_info import GpuInfo

logger = logging.getLogger(__name__)

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


def _ggml_reason(devices: Sequence[GgmlDevice], reason: str | None, why_no_gpu: str) -> str:
    if reason:
        return reason
    only = f"no GPU device, only {', '.join(d.name for d in devices)}"
    return f"{only}: {why_no_gpu}" if why_no_gpu else only


def _real_why_no_gpu() -> str:
    return backend_report().why_no_gpu()


def probe_gpus(
    nvml: Any | None = None,
    ggml: GgmlProbe = probe_devices,
    why_no_gpu: Callable[[], str] | None = None,
) -> tuple[tuple[GpuInfo, ...], str | None, str | None, str | None]:
    """(gpus, reason they are missing, driver version, CUDA driver version); never raises.

    `nvml` defaults to the pynvml module and `ggml` to ggml's real device list;
    tests pass fakes of a described machine. The driver versions are NVIDIA's
    (NVML); a GPU only ggml sees has none here. `why_no_gpu` says why ggml's backends
    found no GPU (the backend modules' report, with ggml's real list).
    """
    nvidia, nvml_reason, driver, cuda = _probe_nvml(nvml)
    try:
        devices, ggml_failure = ggml()
    except Exception as exc:  # an injected list may fail; the real one never raises
        devices, ggml_failure = (), f"ggml error: {_describe(exc)}"
    gpus = _combined(nvidia, devices)
    if gpus:
        return gpus, None, driver, cuda
    if why_no_gpu is None:
        why_no_gpu = _real_why_no_gpu if ggml is probe_devices else str
    ggml_reason = _ggml_reason(devices, ggml_failure, why_no_gpu())
    return (
        (),
        f"{NO_GPU_FOUND} (NVML: {nvml_reason}; ggml: {ggml_reason})",
        driver,
        cuda,
    )
