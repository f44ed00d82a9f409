"""What Help → About says: the version, the llama.cpp build and its backends, the folders.

The window shows this; it lives in app/ because reading the llama.cpp build and
the backend modules goes through llama_cpp, which ui/ never imports. The same
facts are what `shardchat --version` and `shardchat info --devices` print, so a
person reading them out on a support call gives the figures the CLI would.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.paths import app_paths
from engine.llama import backends
from engine.llama.ggml_devices import offload_devices, probe_devices
from engine.machine.hardware import llama_build_id


@dataclass(frozen=True)
class AboutFacts:
    version: str
    llama_build: str  # llama-cpp-python's version, and the features its llama.cpp was built with
    backend_folder: str  # where the modules come from, and the CPU variant chosen
    backends: tuple[str, ...]  # the backend modules loaded, one line each
    skipped_backends: int  # modules not loaded (another CPU's variant, no device)
    gpu: str  # the GPU a model would use, or why none
    data_dir: Path
    log_dir: Path
    log_file: Path


def about_facts() -> AboutFacts:
    """Read the facts now (starts ggml's backends if nothing has yet: the window has, and
    importing this module loads neither ggml nor llama_cpp)."""
    report = backends.start_ggml()
    paths = app_paths()
    return AboutFacts(
        version=shardchat_version(),
        llama_build=llama_build_id(),
        backend_folder=report.lines()[0],
        backends=tuple(m.line() for m in report.modules if m.loaded),
        skipped_backends=sum(not m.loaded for m in report.modules),
        gpu=_gpu_line(report),
        data_dir=paths.data_dir,
        log_dir=paths.log_dir,
        log_file=paths.log_file,
    )


def shardchat_version() -> str:
    """Read when asked: importlib.metadata costs 10-20 ms, which the window, whose Help
    menu imports this module, would pay before its first paint."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shardchat")
    except PackageNotFoundError:
        return "unknown"


def _gpu_line(report: backends.BackendReport) -> str:
    used = offload_devices(probe_devices()[0])
    if used:
        return ", ".join(f"{d.name} ({d.description})" for d in used)
    return f"none: {report.why_no_gpu()}"
