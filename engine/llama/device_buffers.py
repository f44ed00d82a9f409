"""What llama.cpp really allocated, per buffer type, as it reports it.

A plan's VRAM account is a prediction; the only way to know whether it holds is
to read what llama.cpp allocated. llama.cpp logs one line per buffer when it
loads a model and creates a context:

    load_tensors:      Vulkan0 model buffer size =    92.10 MiB
    llama_kv_cache:    Vulkan0 KV buffer size =    11.25 MiB
    sched_reserve:     Vulkan0 compute buffer size =    98.25 MiB

`parse_buffer_lines` turns those lines into bytes per (buffer type, role), and
`simulate_compute_buffers` asks llama.cpp for its compute buffers without
allocating anything (`llama_model_params.no_alloc`, the way llama.cpp's own
`--fit` sizes a placement): it builds the model's worst-case graph and reserves
it, so the sizes are exact, and it runs on any machine whose backend exists.
Model and KV sizes follow from the tensor table and hyper-parameters, which the
inventory already gives; with no_alloc llama.cpp logs them as 0.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import llama_cpp

from engine.llama import backends, offload_boundary, prefetch
from engine.llama import log_capture as llama_log
from engine.llama.buffer_overrides import TensorOverrides, loading_with_overrides
from engine.llama.load_params import LoadParams, make_llama_kwargs

MIB = 1024 * 1024
# llama-model.cpp / llama-kv-cache.cpp / llama-context.cpp:
# "%s: %12s model buffer size = %8.2f MiB", "... KV buffer size ...", "... compute buffer size ..."
# and ShardChat's scheduler patch: "%s: %10s prefetch staging buffer size = %8.2f MiB (%d slots)",
# a part of the compute buffer llama.cpp reports (role "staging", not added to device_bytes)
_BUFFER_LINE = re.compile(
    r"(\S+) (model|KV|compute|output|RS|prefetch staging) buffer size = +([\d.]+) MiB"
)
_ROLES = {
    "model": "model",
    "KV": "kv",
    "RS": "kv",
    "compute": "compute",
    "output": "compute",
    "prefetch staging": "staging",
}
_HOST_BUFFER = re.compile(r"^(CPU.*|.*_Host)$")


@dataclass(frozen=True)
class DeviceBuffers:
    """Bytes llama.cpp allocated, by buffer type ("Vulkan0", "CUDA0", "CPU_Mapped") and role."""

    by_buffer: dict[str, dict[str, int]] = field(default_factory=dict)

    def role_bytes(self, role: str, device_only: bool = True) -> int:
        """Bytes of one role ("model", "kv", "compute") in device memory (or everywhere)."""
        return sum(
            roles.get(role, 0)
            for name, roles in self.by_buffer.items()
            if not (device_only and is_host_buffer(name))
        )

    @property
    def device_bytes(self) -> int:
        """Everything in device (not host) memory: what a VRAM budget has to hold."""
        return sum(self.role_bytes(role) for role in ("model", "kv", "compute"))

    def describe(self) -> str:
        parts = [
            f"{name} {role} {size / MIB:.2f} MiB"
            for name, roles in sorted(self.by_buffer.items())
            for role, size in sorted(roles.items())
        ]
        return ", ".join(parts) or "no buffers"


def is_host_buffer(name: str) -> bool:
    """CPU, CPU_Mapped, CPU_REPACK and pinned "<backend>_Host" buffers are system RAM."""
    return _HOST_BUFFER.match(name) is not None


def parse_buffer_lines(lines: Iterable[str]) -> DeviceBuffers:
    """The buffer sizes in llama.cpp log lines; one buffer reported twice adds up."""
    found: dict[str, dict[str, int]] = {}
    for line in lines:
        match = _BUFFER_LINE.search(line)
        if match is None:
            continue
        name, role, mib = match.groups()
        roles = found.setdefault(name, {})
        roles[_ROLES[role]] = roles.get(_ROLES[role], 0) + round(float(mib) * MIB)
    return DeviceBuffers(found)


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def llama_log_lines() -> Iterator[list[str]]:
    """Collect every line llama.cpp logs inside the block (it logs through one callback)."""
    llama_log.install()
    logger = logging.getLogger("llama.cpp")
    collector = _Collector()
    previous = logger.level
    logger.addHandler(collector)
    if logger.getEffectiveLevel() > logging.DEBUG:
        logger.setLevel(logging.DEBUG)
    try:
        yield collector.lines
    finally:
        logger.removeHandler(collector)
        logger.setLevel(previous)


def simulate_compute_buffers(params: LoadParams) -> DeviceBuffers:
    """llama.cpp's compute buffers for these load parameters, reserved but not allocated."""
    simulated = simulate_buffers(params)
    return DeviceBuffers(
        {
            name: {"compute": roles["compute"]}
            for name, roles in simulated.by_buffer.items()
            if roles.get("compute")
        }
    )


def simulate_buffers(params: LoadParams) -> DeviceBuffers:
    """Every buffer llama.cpp would allocate for these load parameters (model, KV, compute).

    Loads only the metadata (no_alloc, no mmap) with the same layers, overrides,
    context and batch sizes, creates the context (which reserves the worst-case
    graph) and frees both. The op-offload batch size is read by the GPU backend
    once per process, so a simulation in a process whose backend already started
    with another value reports that value's buffers; run it in a child process
    (engine.child_process) when the boundary differs.
    """
    if params.op_offload_min_batch is not None:
        offload_boundary.request(params.op_offload_min_batch)
    backends.start_ggml()
    kwargs = make_llama_kwargs(params)
    overrides = TensorOverrides(params.tensor_overrides) if params.tensor_overrides else None
    with llama_log_lines() as lines:
        with loading_with_overrides(overrides):  # patches the low-level module's defaults
            model_params = llama_cpp.llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = kwargs["n_gpu_layers"]
        model_params.main_gpu = kwargs["main_gpu"]
        if "split_mode" in kwargs:
            model_params.split_mode = kwargs["split_mode"]
        model_params.no_alloc = True
        model_params.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
        model = llama_cpp.llama_model_load_from_file(kwargs["model_path"].encode(), model_params)
        if not model:
            raise RuntimeError(f"llama.cpp could not read {params.model_path}")
        try:
            with prefetch.slots_for_contexts(params.prefetch_slots):
                context = llama_cpp.llama_init_from_model(model, _context_params(params, kwargs))
            if not context:
                raise RuntimeError(f"llama.cpp could not reserve a context for {params.name}")
            llama_cpp.llama_free(context)
        finally:
            llama_cpp.llama_model_free(model)
    return parse_buffer_lines(lines)


def _context_params(params: LoadParams, kwargs: dict[str, Any]) -> Any:
    """The context parameters Llama(...) would pass for these load parameters."""
    context = llama_cpp.llama_context_default_params()
    context.n_ctx = int(kwargs["n_ctx"])
    context.n_batch = params.n_batch
    context.n_ubatch = min(params.n_ubatch, params.n_batch)
    context.n_seq_max = 1
    context.flash_attn_type = (  # as Llama() loads with make_llama_kwargs' flash_attn
        llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        if kwargs["flash_attn"]
        else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    context.op_offload = params.op_offload
    return context
