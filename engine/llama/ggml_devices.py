"""The devices llama.cpp's bundled ggml can run on, as ggml itself lists them.

NVML only knows NVIDIA GPUs, but llama.cpp runs on whatever backends it was
built with: CUDA, Vulkan (AMD, Intel, NVIDIA, or Mesa's software lavapipe),
Metal, SYCL, ... ggml's device registry is the one list that says what *this*
build can offload to, under the names llama.cpp logs ("CUDA0", "Vulkan0"), so
the hardware probe reads it next to NVML.

Reading it never raises: a missing or broken native library is a machine
without ggml devices, with a one-line reason, like a machine without a driver.

Listing initialises each backend (the Vulkan backend creates its instance, the
CUDA backend its runtime) the way loading a model would; that is why it lives
behind a call and not at import. Where a GPU backend may register a device it
also fixes the op-offload boundary for the process (engine.llama.offload_boundary):
so that the first model load can still set its plan's boundary, such a process
lists the devices in a child process, once, and answers from that list until
ggml starts here. Where no GPU can appear (engine.llama.backends.gpu_may_register:
no GPU device node, lavapipe alone) they are listed in-process (no boundary to fix,
no child's second of start-up).
"""

from __future__ import annotations

import ctypes
import enum
import logging
import threading
from dataclasses import dataclass

from engine.child_process import run_in_child
from engine.llama import backends, offload_boundary
from engine.llama.ggml_library import device_name, registered_device_pointers, typed_function

logger = logging.getLogger(__name__)


class DeviceType(enum.IntEnum):
    """enum ggml_backend_dev_type (ggml-backend.h of llama.cpp as vendored in 0.3.36)."""

    UNKNOWN = -1  # a value a newer ggml added; never treated as a GPU
    CPU = 0
    GPU = 1  # dedicated memory
    IGPU = 2  # integrated: its "device memory" is system RAM
    ACCEL = 3  # used together with the CPU backend (BLAS, AMX)
    META = 4  # several devices wrapped for tensor parallelism


@dataclass(frozen=True)
class GgmlDevice:
    """One ggml device: what llama.cpp calls it, what it is, how much memory it has now."""

    name: str  # ggml's device name: "Vulkan0", "CUDA0", "CPU"
    description: str  # the hardware: "NVIDIA GeForce RTX 4060 Laptop GPU", "llvmpipe (...)"
    type: DeviceType
    backend: str  # the backend registry's name: "Vulkan", "CUDA", "Metal", "CPU"
    memory_free_bytes: int
    memory_total_bytes: int
    device_id: str | None = None  # PCI bus id ("0000:01:00.0") where the backend knows it

    @property
    def is_gpu(self) -> bool:
        """A device llama.cpp offloads layers to (it skips CPU and ACCEL devices)."""
        return self.type in (DeviceType.GPU, DeviceType.IGPU)


class _Caps(ctypes.Structure):
    """struct ggml_backend_dev_caps."""

    _fields_ = [
        ("async_", ctypes.c_bool),
        ("host_buffer", ctypes.c_bool),
        ("buffer_from_host_ptr", ctypes.c_bool),
        ("events", ctypes.c_bool),
        ("mmap_support", ctypes.c_bool),
    ]


class _Props(ctypes.Structure):
    """struct ggml_backend_dev_props, with spare room at the end.

    ggml zeroes and fills the struct *it* was compiled with; should a later
    release append fields, the spare bytes take them instead of our stack.
    """

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("description", ctypes.c_char_p),
        ("memory_free", ctypes.c_size_t),
        ("memory_total", ctypes.c_size_t),
        ("type", ctypes.c_int),
        ("device_id", ctypes.c_char_p),
        ("caps", _Caps),
        ("_spare", ctypes.c_char * 256),
    ]


def _text(value: bytes | None) -> str:
    return value.decode("utf-8", errors="replace") if value else ""


def _device_type(value: int) -> DeviceType:
    try:
        return DeviceType(value)
    except ValueError:
        return DeviceType.UNKNOWN


def _backend_name(device: int) -> str:
    reg = typed_function(
        "ggml-base", "ggml_backend_dev_backend_reg", ctypes.c_void_p, ctypes.c_void_p
    )(device)
    if not reg:
        return ""
    name = typed_function("ggml-base", "ggml_backend_reg_name", ctypes.c_char_p, ctypes.c_void_p)
    return _text(name(reg))


def _read_device(device: int) -> GgmlDevice:
    props = _Props()
    get_props = typed_function(
        "ggml-base", "ggml_backend_dev_get_props", None, ctypes.c_void_p, ctypes.c_void_p
    )
    get_props(device, ctypes.byref(props))
    return GgmlDevice(
        name=_text(props.name) or device_name(device),
        description=_text(props.description),
        type=_device_type(props.type),
        backend=_backend_name(device),
        memory_free_bytes=int(props.memory_free),
        memory_total_bytes=int(props.memory_total),
        device_id=_text(props.device_id) or None,
    )


CHILD_PROBE_TIMEOUT_S = 60.0
CHILD_LABEL = "ggml-devices"
DeviceList = tuple[tuple[GgmlDevice, ...], str | None]
_ChildAnswer = tuple[DeviceList, str, backends.BackendReport]

_child_lock = threading.Lock()
_from_child: _ChildAnswer | None = None


def probe_devices() -> DeviceList:
    """(every ggml device in registry order, why there are none); never raises.

    Registry order is llama.cpp's own: its first GPU-type device is the main GPU.
    Before ggml starts in this process the list (memory figures included) is the one
    a child process read at the first call.
    """
    if _here():
        return probe_devices_here()
    return _child_probe()[0]


def system_info() -> str:
    """llama_print_system_info(): the backends and CPU features of this llama.cpp build.

    Listing the backends starts ggml too, so before it has started here this is the
    child's answer (see probe_devices).
    """
    if _here():
        return system_info_here()
    return _child_probe()[1]


def backend_report() -> backends.BackendReport:
    """Which backend modules loaded, which were skipped and why, the CPU variant chosen.

    Loading them starts ggml, so before it has started here this is the child's
    answer (see probe_devices).
    """
    if _here():
        return backends.start_ggml()
    return _child_probe()[2]


def _here() -> bool:
    """Whether listing in this process is harmless: ggml started here already, or no GPU
    backend can register a device whose op-offload boundary a listing would fix."""
    return offload_boundary.in_force() is not None or not backends.gpu_may_register()


def _child_probe() -> _ChildAnswer:
    global _from_child
    with _child_lock:
        if _from_child is None:
            outcome = run_in_child(_probe_here, (), CHILD_PROBE_TIMEOUT_S, label=CHILD_LABEL)
            failure = f"ggml device list failed in a child process: {outcome.failure}"
            unknown = backends.BackendReport("", (), None, loadable=False, failure=failure)
            _from_child = outcome.value if outcome.ok else (((), failure), "", unknown)
        return _from_child


def _probe_here() -> _ChildAnswer:
    return probe_devices_here(), system_info_here(), backends.start_ggml()


def system_info_here() -> str:
    """system_info in this process, starting ggml here; "" where llama.cpp cannot say."""
    backends.start_ggml()  # the system info lists the backends
    try:
        import llama_cpp

        raw = llama_cpp.llama_print_system_info()
    except Exception as exc:  # a broken native library raises OSError/RuntimeError
        logger.warning("llama_print_system_info failed: %s", exc)
        return ""
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)


def probe_devices_here() -> DeviceList:
    """probe_devices in this process, starting ggml here."""
    try:
        devices = tuple(_read_device(device) for device in device_pointers())
    except Exception as exc:  # ImportError/OSError from a broken build, AttributeError, ...
        logger.debug("ggml device list unavailable: %s", exc)
        return (), f"ggml unavailable ({type(exc).__name__}: {exc})"
    return devices, None if devices else "ggml lists no devices"


def offload_devices(devices: tuple[GgmlDevice, ...]) -> tuple[GgmlDevice, ...]:
    """The GPUs a model load offloads to, chosen as llama.cpp chooses them: dedicated GPUs
    in registry order, a GPU seen by a second backend (same PCI id: CUDA0, then Vulkan0)
    once, under the backend registered first; an integrated GPU only where there is none."""
    chosen: list[GgmlDevice] = []
    for device in devices:
        if device.type is not DeviceType.GPU or device.backend == "RPC":
            continue
        if device.device_id and any(d.device_id == device.device_id for d in chosen):
            continue
        chosen.append(device)
    if not chosen:
        chosen = [d for d in devices if d.type is DeviceType.IGPU][:1]
    return tuple(chosen)


def device_pointers() -> list[int]:
    """Every ggml device (ggml_backend_dev_t) in registry order, the backend modules loaded
    first (loading them starts the GPU backends: engine.llama.backends)."""
    backends.start_ggml()
    return registered_device_pointers()


def has_gpu_backend() -> bool:
    """Whether llama.cpp can offload here: a GPU device is registered (a build that ships
    the Vulkan module may still find no GPU), judged from probe_devices' list."""
    return any(device.is_gpu for device in list_devices())


def list_devices() -> tuple[GgmlDevice, ...]:
    """Every ggml device of this llama.cpp build (at least "CPU"); empty if ggml can't be read."""
    return probe_devices()[0]


def device_memory(name: str) -> tuple[int, int]:
    """(free, total) bytes of the ggml device called `name` right now; (0, 0) if unknown.

    For polling one device without listing (and describing) all of them. A
    backend without a budget extension (lavapipe, older Vulkan drivers) reports
    its whole heap as free, so "free" is an upper bound there. Before ggml starts in
    this process, the figures of the child's list (see probe_devices).
    """
    if not _here():
        listed = [d for d in probe_devices()[0] if d.name == name]
        return (listed[0].memory_free_bytes, listed[0].memory_total_bytes) if listed else (0, 0)
    try:
        by_name = typed_function(
            "ggml", "ggml_backend_dev_by_name", ctypes.c_void_p, ctypes.c_char_p
        )
        device = by_name(name.encode())
        if not device:
            return 0, 0
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        memory = typed_function(
            "ggml-base",
            "ggml_backend_dev_memory",
            None,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.POINTER(ctypes.c_size_t),
        )
        memory(device, ctypes.byref(free), ctypes.byref(total))
    except Exception as exc:
        logger.debug("ggml memory of %s unavailable: %s", name, exc)
        return 0, 0
    return int(free.value), int(total.value)
