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

import logging
import platform

from engine.llama.ggml_devices import backend_report, system_info
from engine.machine.cpu_probe import probe_cpu, probe_memory
from engine.machine.gpu_probe import probe_gpus
from engine.machine.hardware_info import GIB, GpuInfo, HardwareInfo

logger = logging.getLogger(__name__)


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
        backends=tuple(backend_report().lines()),
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
