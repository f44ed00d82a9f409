"""Put chosen tensors in chosen backend buffer types when llama.cpp loads a model.

Where a weight lives (VRAM, pinned host memory, plain or repacked CPU memory) is
decided once, at model load, and cannot change while the model is loaded. So the
planner's resident set - the sub-layers it keeps in VRAM for a budget - has to be
expressed in the load parameters, as llama.cpp's `tensor_buft_overrides`: a
NULL-terminated array of {regex pattern, buffer type} entries. For every weight
llama.cpp takes the *first* entry whose pattern `std::regex_search`es the tensor
name (unanchored, ECMAScript grammar) and logs
"tensor <name> (<n> MiB <type>) buffer type overridden to <buffer type>".

This module lists the buffer types the bundled ggml offers (`buffer_types`),
builds that array with ctypes (`TensorOverrides`), turns a set of tensor names
into anchored patterns (`override_patterns_for`), and gets the array into a
`llama_cpp.Llama(...)` load (`loading_with_overrides`).

Two llama.cpp behaviours the planner must know:

- An override to the plain "CPU" buffer type means "host side, llama.cpp picks":
  llama.cpp re-selects among the CPU buffer types for such a tensor, so a Q4_0
  matrix still lands in CPU_REPACK (the log then says "overridden to CPU_REPACK").
- Forcing a tensor the repacker cannot hold (an f32 norm) into CPU_REPACK crashes
  the process, so the CPU "extra" buffer types are refused as targets unless the
  caller opts in for tensors known to be repackable.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import re
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import llama_cpp
import llama_cpp.llama_cpp as llama_low_level

from engine.llama.ggml_devices import device_pointers as _devices
from engine.llama.ggml_library import device_name as _device_name
from engine.llama.ggml_library import typed_function as _fn

LOGGER = logging.getLogger(__name__)

_DEVICE_TYPE_CPU = 0  # enum ggml_backend_dev_type: CPU, GPU, IGPU, ACCEL, META
_EXTRA_BUFTS_PROC = b"ggml_backend_dev_get_extra_bufts"
_GET_EXTRA_BUFTS = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
# Python-only regex syntax that std::regex (ECMAScript) rejects or reads differently:
# named groups, lookbehind, comments, inline flags, \A and \Z. Best effort, not a parser.
_PYTHON_ONLY_SYNTAX = re.compile(r"(?<!\\)\(\?(?:P|<|#|[aiLmsux-])|\\[AZ]")
_BLOCK_TENSOR = re.compile(r"blk\.(\d+)\.(.+)")


@dataclass(frozen=True)
class BufferType:
    """A ggml backend buffer type a tensor can be placed in."""

    name: str  # e.g. "CPU", "CPU_REPACK", "CUDA0", "CUDA_Host"
    device: str  # the ggml device that offers it, e.g. "CPU", "CUDA0"
    is_host: bool  # memory the CPU can read directly
    is_extra: bool = False  # a CPU "extra" type (weight repacking); llama.cpp picks these itself


# ---------------------------------------------------------------- the bundled ggml


def _device_bufts(device: int) -> list[tuple[int, bool]]:
    """(buffer type, is_extra) pointers a device offers: its own, host, CPU extras."""
    own = _fn("ggml-base", "ggml_backend_dev_buffer_type", ctypes.c_void_p, ctypes.c_void_p)
    host = _fn("ggml-base", "ggml_backend_dev_host_buffer_type", ctypes.c_void_p, ctypes.c_void_p)
    found = [(buft, False) for buft in (own(device), host(device)) if buft]
    return found + [(buft, True) for buft in _extra_bufts(device)]


def _extra_bufts(device: int) -> list[int]:
    """The CPU backend's extra buffer types (CPU_REPACK, ...), as llama.cpp finds them."""
    dev_type = _fn("ggml-base", "ggml_backend_dev_type", ctypes.c_int, ctypes.c_void_p)
    if dev_type(device) != _DEVICE_TYPE_CPU:
        return []
    reg = _fn("ggml-base", "ggml_backend_dev_backend_reg", ctypes.c_void_p, ctypes.c_void_p)
    proc = _fn(
        "ggml-base",
        "ggml_backend_reg_get_proc_address",
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_char_p,
    )(reg(device), _EXTRA_BUFTS_PROC)
    if not proc:
        return []
    array = _GET_EXTRA_BUFTS(proc)(device)
    found: list[int] = []
    while array and array[len(found)]:
        found.append(array[len(found)])
    return found


def _describe(buft: int, device: str, is_extra: bool) -> BufferType:
    name = _fn("ggml-base", "ggml_backend_buft_name", ctypes.c_char_p, ctypes.c_void_p)(buft)
    is_host = _fn("ggml-base", "ggml_backend_buft_is_host", ctypes.c_bool, ctypes.c_void_p)(buft)
    return BufferType(name.decode(), device, bool(is_host), is_extra)


def _buffer_type_table() -> dict[str, tuple[BufferType, int]]:
    """Every buffer type by name, with its ggml pointer; the first device offering it wins."""
    table: dict[str, tuple[BufferType, int]] = {}
    for device in _devices():
        device_name = _device_name(device)
        for buft, is_extra in _device_bufts(device):
            described = _describe(buft, device_name, is_extra)
            table.setdefault(described.name, (described, buft))
    return table


def buffer_types() -> dict[str, BufferType]:
    """The buffer types of every ggml device in this build, by name (at least "CPU")."""
    return {name: described for name, (described, _) in _buffer_type_table().items()}


def max_overrides() -> int:
    """How many patterns one load accepts (llama.cpp's limit counts the NULL terminator)."""
    return int(llama_cpp.llama_max_tensor_buft_overrides()) - 1


# ---------------------------------------------------------------- the override array


class _Override(ctypes.Structure):
    """struct llama_model_tensor_buft_override { const char * pattern; buft; }"""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def _check_count(count: int) -> None:
    if count > max_overrides():
        raise ValueError(f"{count} tensor overrides; llama.cpp accepts at most {max_overrides()}")


def _check_pattern(pattern: str) -> None:
    if not pattern or "\0" in pattern:
        raise ValueError(f"tensor override pattern {pattern!r} is empty or contains NUL")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"tensor override pattern {pattern!r} is not a regex: {exc}") from None
    if _PYTHON_ONLY_SYNTAX.search(pattern):
        raise ValueError(
            f"tensor override pattern {pattern!r} uses Python-only regex syntax "
            "that llama.cpp's std::regex (ECMAScript) does not accept"
        )


def _check_target(name: str, table: dict[str, tuple[BufferType, int]], allow_extra: bool) -> int:
    if name not in table:
        raise ValueError(f"unknown buffer type {name!r}; available: {', '.join(table)}")
    described, buft = table[name]
    if described.is_extra and not allow_extra:
        raise ValueError(
            f"buffer type {name!r} is a CPU extra type that llama.cpp picks itself for tensors "
            "overridden to 'CPU'; forcing a tensor it cannot hold into it crashes the process "
            "(pass allow_extra_buffer_types=True only for repackable weight matrices)"
        )
    return buft


class TensorOverrides:
    """A validated, NULL-terminated `llama_model_tensor_buft_override` array.

    The object owns every buffer the array points into (pattern bytes and the array),
    so it must outlive the model load it is used for; llama.cpp does not read it after.
    """

    def __init__(
        self, pairs: Iterable[tuple[str, str]], *, allow_extra_buffer_types: bool = False
    ) -> None:
        self._pairs = tuple((str(pattern), str(name)) for pattern, name in pairs)
        _check_count(len(self._pairs))
        table = _buffer_type_table()
        bufts = []
        for pattern, name in self._pairs:
            _check_pattern(pattern)
            bufts.append(_check_target(name, table, allow_extra_buffer_types))
        self._patterns = [pattern.encode() for pattern, _ in self._pairs]
        self._array = (_Override * (len(self._pairs) + 1))()  # zeroed: the last is the NULL
        for index, (encoded, buft) in enumerate(zip(self._patterns, bufts, strict=True)):
            self._array[index].pattern = encoded
            self._array[index].buft = buft

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        return self._pairs

    @property
    def pointer(self) -> int:
        """Address for `llama_model_params.tensor_buft_overrides`."""
        return ctypes.addressof(self._array)

    def __len__(self) -> int:
        return len(self._pairs)

    def __repr__(self) -> str:
        return f"TensorOverrides({list(self._pairs)!r})"


# ---------------------------------------------------------------- getting it into a load

load_patch_lock = threading.RLock()


@contextlib.contextmanager
def loading_with_overrides(
    overrides: TensorOverrides | None, devices: Sequence[int] | None = None
) -> Iterator[None]:
    """Make `llama_cpp.Llama(...)` constructed in this block load with `overrides`, and on
    `devices` (ggml device pointers, in llama.cpp's order) instead of every GPU.

    llama-cpp-python 0.3.36 has no public hook: `Llama.__init__` calls
    `llama_cpp.llama_cpp.llama_model_default_params()` (looked up on that module at
    call time) and loads the model right away. So, for the duration of this block only
    and under a lock, that module attribute is wrapped so that calls from this thread
    get params whose `tensor_buft_overrides` points at our array (and `devices` at a
    NULL-terminated list); other threads get the untouched defaults, and the original
    is restored in `finally`. If nothing called the defaults (an upgrade changed how
    Llama builds its params) this raises RuntimeError rather than silently loading
    without them, and tests/engine/test_buffer_overrides.py checks in a real load that
    the overrides reach llama.cpp. Neither given: no-op.
    """
    if (overrides is None or len(overrides) == 0) and devices is None:
        yield
        return
    device_list = None
    if devices is not None:  # kept alive for the block: llama.cpp reads it during the load
        device_list = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
    with load_patch_lock:
        original = llama_low_level.llama_model_default_params
        owner = threading.get_ident()
        applied = 0

        def defaults_with_overrides() -> llama_low_level.llama_model_params:
            nonlocal applied
            params: llama_low_level.llama_model_params = original()
            if threading.get_ident() == owner:
                # the fields are pointers; ctypes takes the arrays' addresses for them
                if overrides is not None and len(overrides):
                    params.tensor_buft_overrides = overrides.pointer  # type: ignore[assignment]
                if device_list is not None:
                    params.devices = ctypes.addressof(device_list)  # type: ignore[assignment]
                applied += 1
            return params

        llama_low_level.llama_model_default_params = defaults_with_overrides
        LOGGER.debug(
            "loading with %d tensor buffer type overrides on %s",
            len(overrides) if overrides is not None else 0,
            "every GPU" if devices is None else f"{len(devices)} devices",
        )
        try:
            yield
        finally:
            llama_low_level.llama_model_default_params = original
        if not applied:
            raise RuntimeError(
                "tensor overrides were not applied: nothing in the block called "
                "llama_cpp.llama_cpp.llama_model_default_params() (did llama-cpp-python change?)"
            )


# ---------------------------------------------------------------- patterns from names


def override_patterns_for(
    tensor_names: Iterable[str], buffer_type: str, *, compact: bool = True
) -> list[tuple[str, str]]:
    """Anchored patterns that match exactly `tensor_names`, each paired with `buffer_type`.

    Without `compact`, one `^name$` per tensor. With it, block tensors whose roles
    occur in the same set of blocks share one pattern, e.g.
    `^blk\\.(?:0|1|2)\\.(?:ffn_down\\.weight|ffn_up\\.weight)$` - fewer entries for
    llama.cpp to try per tensor. ValueError if more than llama.cpp accepts.
    """
    names = sorted(set(tensor_names))
    patterns = _compact_patterns(names) if compact else [_exact(name) for name in names]
    _check_count(len(patterns))
    return [(pattern, buffer_type) for pattern in patterns]


def _exact(name: str) -> str:
    return f"^{re.escape(name)}$"


def _alternation(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"(?:{'|'.join(items)})"


def _compact_patterns(names: Sequence[str]) -> list[str]:
    blocks_by_role: dict[str, set[int]] = defaultdict(set)
    others: list[str] = []
    for name in names:
        match = _BLOCK_TENSOR.fullmatch(name)
        if match and str(int(match.group(1))) == match.group(1):
            blocks_by_role[match.group(2)].add(int(match.group(1)))
        else:
            others.append(name)
    roles_by_blocks: dict[tuple[int, ...], list[str]] = defaultdict(list)
    for role, blocks in blocks_by_role.items():
        roles_by_blocks[tuple(sorted(blocks))].append(role)
    patterns = [_exact(name) for name in others]
    for block_ids, roles in sorted(roles_by_blocks.items()):
        block_part = _alternation([str(block) for block in block_ids])
        role_part = _alternation([re.escape(role) for role in sorted(roles)])
        patterns.append(f"^blk\\.{block_part}\\.{role_part}$")
    return patterns
