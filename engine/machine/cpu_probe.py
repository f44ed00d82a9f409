"""The CPU and memory, as /proc/cpuinfo (or macOS's sysctl, or Windows' registry and
IsProcessorFeaturePresent), psutil and llama.cpp's kernels see them."""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
from pathlib import Path

import psutil

from engine.machine.hardware_info import CpuInfo, MemoryInfo

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
# Windows' IsProcessorFeaturePresent numbers (PF_*, winnt.h) -> the name we report. Windows
# names no FMA, F16C, BMI2 or VNNI flag; llama.cpp's CPU variants read CPUID themselves.
_WINDOWS_FEATURES = {
    13: "pni", 36: "ssse3", 37: "sse4_1", 38: "sse4_2", 39: "avx", 40: "avx2", 41: "avx512f",
}  # fmt: skip
_WINDOWS_CPU_KEY = r"HARDWARE\DESCRIPTION\System\CentralProcessor\0"


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
    if sys.platform == "win32":
        return _windows_cpuinfo()
    try:
        return parse_cpuinfo(CPUINFO_PATH.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return {}


def _windows_cpuinfo() -> dict[str, str]:
    """The processor's name as Windows' registry holds it and the features Windows reports,
    in /proc/cpuinfo's keys (Windows has no /proc)."""
    entries: dict[str, str] = {}
    if sys.platform == "win32":
        import winreg

        try:
            with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, _WINDOWS_CPU_KEY) as key:
                entries["model name"] = str(winreg.QueryValueEx(key, "ProcessorNameString")[0])
        except OSError:
            pass
        present = ctypes.windll.kernel32.IsProcessorFeaturePresent
        entries["flags"] = " ".join(f for n, f in _WINDOWS_FEATURES.items() if present(n))
    return {key: value.strip() for key, value in entries.items() if value.strip()}


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
