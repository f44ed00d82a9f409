"""Route llama.cpp's own log into Python logging.

llama.cpp prints a lot (tensor tables, buffer sizes) straight to stderr. Users
should see that only when they ask (`--verbose`); otherwise it belongs in the
log file. We install one C callback for the whole process that forwards each
complete line to the `llama.cpp` logger, and the app decides where that goes.
Tests also read this logger to check what llama.cpp reported (buffer types,
overrides), so the lines must arrive intact.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Iterator

import llama_cpp

LOGGER = logging.getLogger("llama.cpp")

# ggml_log_level: NONE=0, DEBUG=1, INFO=2, WARN=3, ERROR=4, CONT=5 (continues the previous line)
_LEVELS = {0: logging.INFO, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_CONTINUE = 5


class _LineAssembler:
    """llama.cpp emits lines in pieces; join them so each log record is one line."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending = ""
        self._level = logging.INFO

    def feed(self, ggml_level: int, text: str) -> None:
        lines: list[tuple[int, str]] = []
        with self._lock:
            if ggml_level != _CONTINUE:
                # A new message: an unfinished one is either load-progress dots or a real line.
                if self._pending.strip("."):
                    lines.append((self._level, self._pending))
                self._pending = ""
                self._level = _LEVELS.get(ggml_level, logging.INFO)
            *complete, self._pending = (self._pending + text).split("\n")
            lines.extend((self._level, line) for line in complete)
        for level, line in lines:
            if line.strip():
                LOGGER.log(level, line)


_assembler = _LineAssembler()


def _log_line(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    _assembler.feed(level, text.decode("utf-8", errors="replace"))


# the ctypes callback llama.cpp calls; kept at module level so it is never collected
_on_llama_log = llama_cpp.llama_log_callback(_log_line)


_installed = False


def install() -> None:
    """Send llama.cpp's log to the `llama.cpp` logger from now on (idempotent)."""
    global _installed
    if not _installed:
        llama_cpp.llama_log_set(_on_llama_log, ctypes.c_void_p(0))
        _installed = True


_mtmd_installed = False


def install_mtmd() -> None:
    """The same for the multimodal library (mtmd, clip), which keeps a logger of its own.

    Imported lazily: only the vision path loads libmtmd.
    """
    global _mtmd_installed
    if not _mtmd_installed:
        from llama_cpp import mtmd_cpp

        install()
        mtmd_cpp.mtmd_helper_log_set(_on_llama_log, ctypes.c_void_p(0))
        _mtmd_installed = True


class ErrorLines(logging.Handler):
    """The ERROR lines llama.cpp logged while loading: they say why a load returned nothing."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage().strip())

    @property
    def reason(self) -> str:
        """llama_model_load's "error loading model: ..." line says why; later ones only that."""
        said = [line for line in self.lines if "error loading" in line] or self.lines
        return said[0].split("error loading model: ")[-1] if said else ""


@contextlib.contextmanager
def errors_logged() -> Iterator[ErrorLines]:
    """llama.cpp's ERROR lines while the block runs (another thread's load may add its own:
    the log is the process's), so a refusal can say why llama.cpp returned nothing."""
    install()
    lines = ErrorLines()
    LOGGER.addHandler(lines)
    try:
        yield lines
    finally:
        LOGGER.removeHandler(lines)
