"""Typed ctypes access to the ggml libraries that llama-cpp-python bundles.

llama-cpp-python binds llama.h only; ggml's backend API (devices, buffer types,
memory) is reached here, in the very copy of each library llama.cpp runs on.
That matters: ggml keeps its device registry and buffer types as process
globals, so a second copy of a library would list devices llama.cpp does not
use and hand out buffer-type pointers llama.cpp does not recognise.

`llama_cpp` is imported on first use, not at import time, so that modules
which only might ask (the hardware probe, imported by the GUI) stay cheap and
a broken native library becomes an error of the call, never of the import.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any


def is_library_file(name: str, stem: str) -> bool:
    """Whether a file name is one of the names `stem` is shipped under (libggml.so.0, ...)."""
    pattern = rf"(lib)?{re.escape(stem)}(\.\d+)*\.(so|dylib|dll)(\.\d+)*"
    return re.fullmatch(pattern, name) is not None


@functools.cache
def loaded_library(stem: str) -> ctypes.CDLL:
    """The copy of `stem` that llama.cpp itself runs on.

    The wheel ships each library as plain copies under several names (libggml-base.so,
    .so.0, .so.0.25.3). Opening a name other than the one libllama was linked against
    maps a second copy with its own globals (its `ggml_backend_cpu_buffer_type()` is at
    another address than the one llama.cpp compares overrides with). RTLD_NOLOAD only
    returns a copy that is already loaded; on Windows the loader reuses it by itself.
    Importing llama_cpp first loads libllama and, through it, the ggml it links.
    """
    import llama_cpp

    folder = Path(llama_cpp.__file__).parent / "lib"
    mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LAZY", 0)
    for path in sorted(folder.iterdir()):
        if is_library_file(path.name, stem):
            with contextlib.suppress(OSError):
                return ctypes.CDLL(str(path), mode=mode)
    raise RuntimeError(f"llama.cpp's {stem} library is not loaded from {folder}")


@functools.cache
def typed_function(stem: str, name: str, restype: object, *argtypes: object) -> Callable[..., Any]:
    """A typed function of the loaded `stem` library (cached: ctypes lookups are slow)."""
    function: Callable[..., Any] = getattr(loaded_library(stem), name)
    function.restype = restype  # type: ignore[attr-defined]  # a ctypes function pointer
    function.argtypes = list(argtypes)  # type: ignore[attr-defined]  # a ctypes function pointer
    return function


def registered_device_pointers() -> list[int]:
    """Every ggml device (ggml_backend_dev_t) registered so far, in registry order (the order
    llama.cpp uses). engine.llama.ggml_devices.device_pointers loads the backends first."""
    count = typed_function("ggml", "ggml_backend_dev_count", ctypes.c_size_t)()
    get = typed_function("ggml", "ggml_backend_dev_get", ctypes.c_void_p, ctypes.c_size_t)
    return [get(i) for i in range(count)]


def device_name(device: int) -> str:
    """ggml's name of a device, the one llama.cpp logs and buffer types refer to ("CUDA0")."""
    name = typed_function("ggml-base", "ggml_backend_dev_name", ctypes.c_char_p, ctypes.c_void_p)
    raw: bytes = name(device)
    return raw.decode()
