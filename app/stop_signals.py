"""Ctrl-C and SIGTERM (Ctrl-Break on Windows) for a command whose work runs llama.cpp on
another thread.

A KeyboardInterrupt may surface anywhere on the main thread, including in the
`finally` that frees the model, and an interrupted `thread.join` let the model
be freed while the job thread was still inside llama_decode: SIGSEGV or SIGABRT
in 16 of 17 tries. So while `StopSignals` holds, neither signal raises: the
first sets a cancel token (the work stops at its next step and ends as it
always does, writing what is finished), and a second ends the process at once
with os._exit after flushing the standard streams. No finaliser runs then, so
nothing frees a model under a running thread; what was finished is already on
disk (atomic files, SQLite transactions), and a temp file left mid-write is
cleared by the next run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TypeVar

from engine.cancel import CancelToken

EXIT_INTERRUPTED = 130
POLL_S = 0.1  # how long a signal may wait for its handler while the main thread waits
# Windows sends no SIGTERM; its consoles' Ctrl-Break (and a GenerateConsoleCtrlEvent of
# CTRL_BREAK_EVENT, how a program asks a console child to stop) arrives as SIGBREAK
STOP_SIGNALS: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)
if sys.platform == "win32":
    STOP_SIGNALS += (signal.SIGBREAK,)

T = TypeVar("T")


class StopSignals:
    """While held (on the main thread), Ctrl-C and SIGTERM ask the work to stop; twice, exit."""

    def __init__(self, stopping: str, stopped_at_once: str) -> None:
        """`stopping`: said at the first signal; `stopped_at_once`: said before exiting at the
        second (it should say what is kept and how to go on)."""
        self.cancel = CancelToken()
        self._requested = threading.Event()
        self._stopping, self._stopped_at_once = stopping, stopped_at_once
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():  # only it may set handlers
            for number in STOP_SIGNALS:
                self._previous[number] = signal.signal(number, self._on_signal)
        return self

    def __exit__(self, *_exc: object) -> None:
        """The previous handlers again, unless a stop was asked for: then the process is on its
        way out, and a second signal must still mean "at once", never a KeyboardInterrupt in a
        finaliser or the default SIGTERM."""
        if not self.requested:
            for number, handler in self._previous.items():
                signal.signal(number, handler)
        self._previous.clear()

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def wait(self) -> None:
        """Block until a stop is asked for. In short waits: the kernel may hand the signal to
        any thread, and Python runs its handler only once the main thread runs Python again."""
        while not self._requested.wait(POLL_S):
            pass

    def _on_signal(self, _number: int, _frame: FrameType | None) -> None:
        if not self._requested.is_set():
            self._requested.set()
            self.cancel.cancel()
            _say(self._stopping)
            return
        _say(self._stopped_at_once)
        exit_now(EXIT_INTERRUPTED)


def on_ctrl_c(
    handler: Callable[[int, FrameType | None], object] | int,
) -> contextlib.AbstractContextManager[None]:
    """Ctrl-C (SIGINT) handled by `handler` (or ignored: signal.SIG_IGN) for the block."""
    return on_signal(signal.SIGINT, handler)


@contextlib.contextmanager
def on_signal(
    number: int, handler: Callable[[int, FrameType | None], object] | int
) -> Iterator[None]:
    """Signal `number` handled by `handler` for the block, then as before; off the main
    thread, which may not set handlers, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(number, handler)
    try:
        yield
    finally:
        signal.signal(number, previous)


def run_on_thread(work: Callable[[], T], name: str = "shardchat-work") -> T:
    """`work()` on a thread of its own, this thread waiting for it; its exception re-raised here.

    The work loads, uses and frees its model itself, so no other thread can free the model
    while it decodes. The wait is in short joins, so that a signal the kernel handed to
    another thread still has its handler run here promptly."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = work()
        except BaseException as exc:  # reported on the main thread, where exit codes are decided
            result["error"] = exc

    thread = threading.Thread(target=target, name=name)
    thread.start()
    while thread.is_alive():
        thread.join(POLL_S)
    if "error" in result:
        raise result["error"]
    return result["value"]


def exit_now(code: int) -> None:
    """End the process without finalisers (a thread may still be inside llama.cpp)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, RuntimeError):  # closed, or mid-write
            stream.flush()
    os._exit(code)


def _say(message: str) -> None:
    with contextlib.suppress(OSError, ValueError, RuntimeError):  # stderr closed or mid-write
        print(f"\n{message}", file=sys.stderr, flush=True)
