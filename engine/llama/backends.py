"""ggml's backend modules: loaded once from llama-cpp-python's library folder, with reasons.

ShardChat's llama.cpp is built as llama.cpp's own releases are (GGML_BACKEND_DL):
every backend is a module loaded at run time (`libggml-cpu-haswell.so`,
`libggml-vulkan.so`, `libggml-rpc.so`, `libggml-cuda.so` where built), so one build
serves every machine. llama-cpp-python never loads them (its issue #2069), and
ggml's own `ggml_backend_load_all()` looks beside the executable, not in
`llama_cpp/lib`, and skips a module that fails without saying why. So this module
loads them itself, in ggml's order, and keeps what happened to each one: a user
whose GPU is not used must be able to read why (`shardchat info --devices`).

- CPU: one module per x86 level; each says through `ggml_backend_score()` whether
  this CPU (and, with the project's patch, its OS) runs it, and the highest score
  is loaded, as ggml does. `SHARDCHAT_CPU_VARIANT=haswell` forces one.
- GPU and RPC modules: each loaded; one whose libraries are missing (no Vulkan
  loader, no CUDA driver) or whose driver finds nothing is skipped with that reason.
- Where two backends see the same GPU (CUDA and Vulkan, same PCI bus id), llama.cpp
  uses the device registered first; CUDA is loaded before Vulkan unless
  `SHARDCHAT_GPU_BACKEND=vulkan` says otherwise.

Loading registers the modules' devices, which is when GPU backends read the
op-offload boundary: `start_ggml()` notes that start (engine.llama.offload_boundary)
before it loads anything. A build whose backends are linked in (no module files,
e.g. macOS's Metal build) has nothing to load and is reported as such.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import logging
import os
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from engine.llama import offload_boundary
from engine.llama.ggml_library import typed_function

log = logging.getLogger(__name__)

CPU_VARIANT_ENV = "SHARDCHAT_CPU_VARIANT"
GPU_BACKEND_ENV = "SHARDCHAT_GPU_BACKEND"

# ggml_backend_load_all_from_path's order (ggml-backend-reg.cpp): the registry's order is
# llama.cpp's device order, and of two devices with one PCI id it keeps the first
LOAD_ORDER = (
    "blas", "zendnn", "cann", "cuda", "hip", "metal", "rpc", "sycl", "vulkan",
    "virtgpu", "opencl", "hexagon", "musa", "openvino", "cpu",
)  # fmt: skip
GPU_MODULES = ("cuda", "hip", "metal", "sycl", "vulkan", "musa", "opencl")
_MODULE_NAME = re.compile(r"^(?:lib)?ggml-([a-z0-9]+)(?:-([A-Za-z0-9_.]+))?\.(?:so|dll|dylib)$")
_NOT_MODULES = {"base"}  # libggml-base: the core every module links, not a backend
_LOCAL = getattr(os, "RTLD_LOCAL", 0)  # POSIX only; Windows loads privately anyway


@dataclass(frozen=True)
class BackendModule:
    """One module file and what became of it."""

    file: str  # "libggml-vulkan.so"
    backend: str  # "vulkan", "cpu", "rpc"
    variant: str | None  # the CPU variant ("haswell"); None for other backends
    loaded: bool
    devices: tuple[str, ...]  # ggml's names of the devices it registered ("Vulkan0")
    note: str  # why it was skipped, or what it found

    def line(self) -> str:
        state = "loaded" if self.loaded else "skipped"
        return f"{self.file}: {state}" + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class BackendReport:
    """What `start_ggml` loaded in this process, for the user and for the probe."""

    folder: str
    modules: tuple[BackendModule, ...]
    cpu_variant: str | None  # the CPU module loaded ("haswell"); None in a linked-in build
    loadable: bool  # a GGML_BACKEND_DL build; False: backends are linked into libggml
    failure: str | None = None  # llama.cpp could not be reached at all

    def lines(self) -> list[str]:
        if self.failure:
            return [f"backends: none ({self.failure})"]
        if not self.loadable:
            return [f"backends: linked into libggml (no loadable modules in {self.folder})"]
        variant = self.cpu_variant or "none loaded"
        head = f"backends: modules from {self.folder}; CPU variant: {variant}"
        return [head, *(f"  {module.line()}" for module in self.modules)]

    def why_no_gpu(self) -> str:
        """One line: why no GPU backend offers a device (meaningful when none does)."""
        if self.failure:
            return f"llama.cpp could not be loaded ({self.failure})"
        gpu = [module for module in self.modules if module.backend in GPU_MODULES]
        if not self.loadable:
            return "this llama.cpp build has no GPU backend"
        if not gpu:
            return f"this llama.cpp build ships no GPU backend module in {self.folder}"
        return "; ".join(f"{module.file}: {module.note}" for module in gpu)


def library_folder() -> Path:
    """llama-cpp-python's own library folder (the modules sit beside libggml there)."""
    import llama_cpp

    return Path(llama_cpp.__file__).parent / "lib"


def module_files(folder: Path) -> list[tuple[str, str | None, Path]]:
    """(backend, variant, path) of every backend module in `folder`."""
    found = []
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        match = _MODULE_NAME.match(path.name)
        if match and match.group(1) not in _NOT_MODULES and path.is_file():
            found.append((match.group(1), match.group(2), path))
    return found


def gpu_may_register() -> bool:
    """Whether starting ggml here could register a GPU device; cheap: it reads file names
    and the environment and starts nothing, so a process can ask before its first plan.

    The Vulkan module ships everywhere, so "a GPU module ships" would say yes on every
    machine. No is said only where it is certain, on Linux: no GPU device node (every
    GPU driver makes one: DRM render nodes for Mesa's drivers, /dev/nvidia* for NVIDIA's,
    /dev/dxg under WSL) or no Vulkan driver manifest but Mesa's lavapipe (a CPU-type
    device llama.cpp skips unless GGML_VK_VISIBLE_DEVICES names it); for the CUDA module,
    no NVIDIA driver. A wrong yes costs a child process (engine.llama.ggml_devices).
    """
    try:
        folder = library_folder()
    except Exception:  # a broken native library: nothing ships that could run
        return False
    shipped = {backend for backend, _, _ in module_files(folder)} & set(GPU_MODULES)
    return any(_may_find_devices(backend) for backend in shipped)


# Mesa's software rasteriser; ggml's Vulkan backend skips its CPU-type device unless told
_SOFTWARE_VULKAN_DRIVERS = ("lvp_icd",)
_VULKAN_MANIFEST_DIRS = (
    "/etc/vulkan/icd.d",
    "/usr/share/vulkan/icd.d",
    "/usr/local/share/vulkan/icd.d",
)


def _may_find_devices(backend: str) -> bool:
    if not sys.platform.startswith("linux"):
        return True
    if backend == "vulkan":
        return _vulkan_may_offer_a_gpu()
    if backend == "cuda":
        return Path("/proc/driver/nvidia").exists() or _has_library("cuda")
    return True


def _vulkan_may_offer_a_gpu() -> bool:
    if os.environ.get("GGML_VK_VISIBLE_DEVICES"):
        return True
    if not _gpu_device_nodes():
        return False
    named = os.environ.get("VK_DRIVER_FILES") or os.environ.get("VK_ICD_FILENAMES")
    if named:
        manifests = [Path(p) for p in named.split(os.pathsep) if Path(p).is_file()]
    else:
        data_dirs = os.environ.get("XDG_DATA_DIRS", "").split(os.pathsep)
        folders = [*_VULKAN_MANIFEST_DIRS, *(f"{d}/vulkan/icd.d" for d in data_dirs if d)]
        manifests = [p for f in folders if Path(f).is_dir() for p in Path(f).glob("*.json")]
    return any(not p.name.startswith(_SOFTWARE_VULKAN_DRIVERS) for p in manifests)


def _gpu_device_nodes() -> list[str]:
    return glob.glob("/dev/dri/renderD*") + glob.glob("/dev/nvidia[0-9]*") + glob.glob("/dev/dxg")


def _has_library(name: str) -> bool:
    import ctypes.util

    return ctypes.util.find_library(name) is not None


_lock = threading.Lock()
_report: BackendReport | None = None


def start_ggml() -> BackendReport:
    """Load the backend modules once (idempotent, thread-safe); never raises.

    Call before anything of ggml's runs in this process: a model load, a device list,
    llama.cpp's system info. The op-offload boundary in the environment now is final.
    """
    global _report
    with _lock:
        if _report is None:
            # An abort prints its assertion and ends; ggml's default first attaches gdb for a
            # backtrace, which looked like a hang for as long as that took.
            os.environ.setdefault("GGML_NO_BACKTRACE", "1")
            offload_boundary.note_ggml_start()
            _install_llama_log()  # the modules log as they load: into our log, not stderr
            _report = _load_all()
            for line in _report.lines():
                log.info("%s", line)
        return _report


def start_ggml_meanwhile() -> None:
    """Start ggml on a thread of its own and return at once. Loading the backend modules is
    mostly C without the interpreter (a Vulkan driver takes 0.1 s and more: lavapipe's
    0.13 s here), so it runs beside the caller's imports; whoever needs ggml next waits in
    start_ggml for what is left of it."""
    threading.Thread(target=start_ggml, name="shardchat-ggml-start", daemon=True).start()


def why_no_gpu() -> str:
    """Why llama.cpp has no GPU device in this process, in one line (starts ggml)."""
    return start_ggml().why_no_gpu()


def _install_llama_log() -> None:
    try:
        from engine.llama import log_capture

        log_capture.install()
    except Exception as exc:  # a broken native library: _load_all reports it
        log.debug("llama.cpp's log not captured: %s", exc)


def _load_all() -> BackendReport:
    try:
        folder = library_folder()
        files = module_files(folder)
        if not files:
            return BackendReport(str(folder), (), None, loadable=False)
        ggml = _Ggml()
        if sys.platform == "win32":
            # Windows looks for a module's own dependencies (the CUDA runtime shipped beside
            # ggml-cuda.dll) in the program's folder and on PATH, not beside the module
            os.environ["PATH"] = os.pathsep.join([str(folder), os.environ.get("PATH", "")])
    except Exception as exc:  # ImportError/OSError: the native library itself is broken
        return BackendReport("", (), None, loadable=False, failure=f"{type(exc).__name__}: {exc}")
    modules: list[BackendModule] = []
    cpu_variant = None
    for backend in _load_order(sorted({backend for backend, _, _ in files})):
        same = [(variant, path) for name, variant, path in files if name == backend]
        if backend == "cpu" and any(variant for variant, _ in same):
            cpu_modules = _load_cpu_variant(ggml, same)
            modules.extend(cpu_modules)
            cpu_variant = next((m.variant for m in cpu_modules if m.loaded), None)
        else:
            modules.extend(_load(ggml, backend, variant, path) for variant, path in same)
    modules.sort(key=lambda module: module.file)
    return BackendReport(str(folder), tuple(modules), cpu_variant, loadable=True)


def _load_cpu_variant(ggml: _Ggml, files: list[tuple[str | None, Path]]) -> list[BackendModule]:
    """The chosen CPU variant loaded, and every other one skipped with its reason."""
    chosen, notes = _choose_cpu_variant(files)
    modules = [
        BackendModule(path.name, "cpu", variant, False, (), notes[path])
        for variant, path in files
        if path != chosen
    ]
    if chosen is not None:
        variant = next(variant for variant, path in files if path == chosen)
        modules.append(_load(ggml, "cpu", variant, chosen))
    return modules


def _load_order(backends: list[str]) -> list[str]:
    order = list(LOAD_ORDER)
    if os.environ.get(GPU_BACKEND_ENV, "").strip().lower() == "vulkan":
        order.remove("vulkan")
        order.insert(order.index("cuda"), "vulkan")
    known = [backend for backend in order if backend in backends]
    return known + [backend for backend in backends if backend not in order]


def _choose_cpu_variant(
    files: list[tuple[str | None, Path]],
) -> tuple[Path | None, dict[Path, str]]:
    """The CPU module to load and, for each other one, why not: ggml's rule (highest
    `ggml_backend_score()`, 0 = cannot run here) unless SHARDCHAT_CPU_VARIANT names one."""
    forced = os.environ.get(CPU_VARIANT_ENV, "").strip()
    scores = {path: _score(path) for _, path in files}
    notes: dict[Path, str] = {}
    if forced:
        named = [path for variant, path in files if variant == forced]
        if named and scores[named[0]] > 0:
            for _, path in files:
                notes[path] = f"{CPU_VARIANT_ENV}={forced} chose another"
            return named[0], notes
        log.warning(
            "%s=%s: no such CPU variant runs here; choosing by score", CPU_VARIANT_ENV, forced
        )
    best = max(scores, key=lambda path: scores[path])
    for path, score in scores.items():
        if score <= 0:
            notes[path] = "needs instructions this CPU or its OS does not enable"
        else:
            notes[path] = f"score {score}, below {scores[best]}"
    return (best if scores[best] > 0 else None), notes


def _score(path: Path) -> int:
    """The module's own `ggml_backend_score()`; 0 when it cannot even be opened."""
    try:
        library = ctypes.CDLL(str(path), mode=_LOCAL | getattr(os, "RTLD_NOW", 0))
    except OSError as exc:
        log.debug("%s does not open: %s", path.name, exc)
        return 0
    try:
        score = getattr(library, "ggml_backend_score", None)
        if score is None:
            return 0
        score.restype = ctypes.c_int
        return int(score())
    finally:
        _close(library)


def _close(library: ctypes.CDLL) -> None:
    import _ctypes

    close = getattr(_ctypes, "dlclose", None) or getattr(_ctypes, "FreeLibrary", None)
    if close is not None:
        with contextlib.suppress(OSError):
            close(library._handle)


def _load(ggml: _Ggml, backend: str, variant: str | None, path: Path) -> BackendModule:
    registry = ggml.load(path)
    if not registry:
        return BackendModule(path.name, backend, variant, False, (), _why_not_loaded(path, backend))
    devices = ggml.device_names(registry)
    note = "devices: " + ", ".join(devices) if devices else _why_no_devices(backend)
    return BackendModule(path.name, backend, variant, True, devices, note)


def _why_not_loaded(path: Path, backend: str) -> str:
    """Why ggml_backend_load returned nothing: a library it needs is missing (the
    loader says which), or the backend's own start found no driver or device."""
    try:
        library = ctypes.CDLL(str(path), mode=_LOCAL | getattr(os, "RTLD_LAZY", 0))
    except OSError as exc:
        # the loader's own words; a frozen app's ctypes (PyInstaller) raises a generic
        # error of its own from them
        said = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
        return f"a library it needs is missing: {_first_line(str(said))}"
    _close(library)
    if backend == "vulkan":
        return "the Vulkan loader found no driver (no ICD installed)"
    if backend == "cuda":
        return "the CUDA runtime found no NVIDIA driver or GPU"
    return f"the {backend} backend did not start"


def _why_no_devices(backend: str) -> str:
    if backend == "vulkan":
        return (
            "no Vulkan GPU (software devices such as lavapipe count only when "
            "GGML_VK_VISIBLE_DEVICES names them)"
        )
    if backend == "rpc":
        return "no servers added"
    if backend == "cuda":
        return "no NVIDIA GPU (or no NVIDIA driver) found"
    return "no devices"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


class _Ggml:
    """The few registry functions of the libggml llama.cpp runs on."""

    def __init__(self) -> None:
        self._load = typed_function("ggml", "ggml_backend_load", ctypes.c_void_p, ctypes.c_char_p)
        self._dev_count = typed_function(
            "ggml-base", "ggml_backend_reg_dev_count", ctypes.c_size_t, ctypes.c_void_p
        )
        self._dev_get = typed_function(
            "ggml-base",
            "ggml_backend_reg_dev_get",
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
        )
        self._dev_name = typed_function(
            "ggml-base", "ggml_backend_dev_name", ctypes.c_char_p, ctypes.c_void_p
        )

    def load(self, path: Path) -> int | None:
        registry: int | None = self._load(os.fsencode(path))
        return registry

    def device_names(self, registry: int) -> tuple[str, ...]:
        count = int(self._dev_count(registry))
        names = (self._dev_name(self._dev_get(registry, i)) for i in range(count))
        return tuple(name.decode("utf-8", errors="replace") for name in names)
