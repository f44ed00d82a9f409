"""A flag llama.cpp reads between graph nodes to stop a long step, with no Python in it.

llama.cpp calls a context's abort callback after every graph node, hundreds of times a
step. A ctypes callback runs Python, and Python needs the GIL: while another thread of
the process runs Python (the API server's loop reading requests, the window), each of
those calls waits its turn for the GIL. Measured on 2 cores with one other thread
running Python, a 45-token prompt step took 0.93 to 1.36 s with a Python callback and
0.37 to 0.42 s without one (bench/abort_check.py; docs/measurements.md, "The abort
check without the GIL").

So the callback is native: the C library's `strlen`, over two bytes that hold 0 or 1
and a terminating 0. It returns 1 once the flag is raised and 0 before. llama.cpp
reads the result as a C `bool`, the low byte of the return register, which `strlen`'s
0 or 1 fills the same way on every ABI the app ships on (x86-64 System V and Windows,
arm64). Whoever cancels raises the flag (engine.cancel.CancelToken.watching); a byte
store is seen by the computing thread at its next node.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import llama_cpp


def _c_strlen() -> Any:
    """`strlen` of the C library this process already has loaded."""
    library = ctypes.cdll.msvcrt if sys.platform == "win32" else ctypes.CDLL(None)
    return library.strlen


_NATIVE_CHECK = ctypes.cast(_c_strlen(), llama_cpp.ggml_abort_callback)


class AbortFlag:
    """One step's abort flag: raised from any thread, read by llama.cpp's compute thread."""

    def __init__(self) -> None:
        self._cell = ctypes.create_string_buffer(2)  # the flag, then strlen's terminator

    @property
    def callback(self) -> Any:
        """The ggml_abort_callback to hand llama.cpp, with `data` as its argument."""
        return _NATIVE_CHECK

    @property
    def data(self) -> ctypes.c_void_p:
        return ctypes.c_void_p(ctypes.addressof(self._cell))

    def raise_flag(self) -> None:
        self._cell[0] = b"\x01"

    @property
    def raised(self) -> bool:
        return self._cell[0] != b"\x00"
