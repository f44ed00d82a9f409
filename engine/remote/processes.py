"""Helper processes (an RPC server, an ssh forward): started so that they end with this
process, and ended for sure without waiting long.

Nothing may stay lent or forwarded when ShardChat is gone, even killed (SIGKILL, a
crash) before it could stop its helpers. On Linux a helper asks the kernel for SIGTERM
when its parent goes (PR_SET_PDEATHSIG). The kernel means the parent *thread*, so a
helper is started from a thread of its own that lives exactly as long as the helper:
the window starts sharing from a worker thread that ends long before the server should.
On Windows every helper joins one Job object that this process holds open and that
kills what it holds when it closes (JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE): Windows closes
it when this process ends, however it ends.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

GRACE_S = 5.0
WAIT_STEP_S = 0.1  # how long a signal may wait for its handler while the main thread waits
_PR_SET_PDEATHSIG = 1


def end_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not ended within the grace time; reaped either way."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class KeptProcess:
    """A helper process and the thread that keeps it, which reaps it when it ends.

    That thread sits in Popen.wait, holding the Popen's wait lock, so another thread's
    Popen.wait() without a timeout would block on the lock, where a signal the kernel
    gave to another thread would not interrupt it (`shardchat share` waits on its server
    on the main thread, for Ctrl-C): waiting is on `ended`, in short steps."""

    def __init__(self, process: subprocess.Popen[bytes], ended: threading.Event) -> None:
        self.process = process
        self.ended = ended

    def poll(self) -> int | None:
        return self.process.returncode if self.ended.is_set() else None

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Its exit code once it has ended, or None after `timeout_s`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.ended.wait(WAIT_STEP_S):
            if deadline is not None and time.monotonic() > deadline:
                return None
        return self.process.returncode


def start_kept(
    command: list[str],
    stdout: int | IO[Any] | None,
    stderr: int | IO[Any] | None,
    env: dict[str, str] | None = None,
) -> KeptProcess:
    """`command` started from a thread that waits on it, so that where the kernel can end
    a child with its parent (Linux), the child ends with this process and not before."""
    started: queue.Queue[subprocess.Popen[bytes] | BaseException] = queue.Queue(1)
    ended = threading.Event()

    def keep() -> None:
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=env,
                preexec_fn=_ending_with_parent(),  # a prctl only: no lock is taken
            )
        except BaseException as exc:  # the caller's to raise
            started.put(exc)
            return
        if sys.platform == "win32":
            _windows_job().hold(process)
        started.put(process)
        process.wait()
        ended.set()

    threading.Thread(target=keep, name=f"keeper of {Path(command[0]).name}", daemon=True).start()
    result = started.get()
    if isinstance(result, BaseException):
        raise result
    return KeptProcess(result, ended)


def _ending_with_parent() -> Callable[[], None] | None:
    """What the child runs before exec on Linux: SIGTERM when its parent thread ends (and
    exit at once if the parent is already gone); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arm


class _WindowsJob:
    """A Job object that kills its processes when its last handle closes. This process
    holds the only handle for as long as it lives, and never closes it."""

    _KILL_ON_JOB_CLOSE = 0x2000
    _EXTENDED_LIMIT_INFORMATION = 9  # JobObjectExtendedLimitInformation

    def __init__(self) -> None:
        from ctypes import wintypes

        class BasicLimits(ctypes.Structure):
            _fields_ = [
                ("PerProcessUserTimeLimit", ctypes.c_int64),
                ("PerJobUserTimeLimit", ctypes.c_int64),
                ("LimitFlags", wintypes.DWORD),
                ("MinimumWorkingSetSize", ctypes.c_size_t),
                ("MaximumWorkingSetSize", ctypes.c_size_t),
                ("ActiveProcessLimit", wintypes.DWORD),
                ("Affinity", ctypes.c_size_t),
                ("PriorityClass", wintypes.DWORD),
                ("SchedulingClass", wintypes.DWORD),
            ]

        class ExtendedLimits(ctypes.Structure):
            _fields_ = [
                ("BasicLimitInformation", BasicLimits),
                ("IoInfo", ctypes.c_uint64 * 6),  # IO_COUNTERS
                ("ProcessMemoryLimit", ctypes.c_size_t),
                ("JobMemoryLimit", ctypes.c_size_t),
                ("PeakProcessMemoryUsed", ctypes.c_size_t),
                ("PeakJobMemoryUsed", ctypes.c_size_t),
            ]

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
        kernel32.CreateJobObjectW.restype = wintypes.HANDLE
        kernel32.CreateJobObjectW.argtypes = (wintypes.LPVOID, wintypes.LPCWSTR)
        kernel32.SetInformationJobObject.argtypes = (
            wintypes.HANDLE, ctypes.c_int, wintypes.LPVOID, wintypes.DWORD,
        )  # fmt: skip
        kernel32.AssignProcessToJobObject.argtypes = (wintypes.HANDLE, wintypes.HANDLE)
        self._kernel32 = kernel32
        self._job = kernel32.CreateJobObjectW(None, None)
        if not self._job:
            raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined]
        limits = ExtendedLimits()
        limits.BasicLimitInformation.LimitFlags = self._KILL_ON_JOB_CLOSE
        if not kernel32.SetInformationJobObject(
            self._job, self._EXTENDED_LIMIT_INFORMATION, ctypes.byref(limits), ctypes.sizeof(limits)
        ):
            raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined]

    def hold(self, process: subprocess.Popen[bytes]) -> None:
        handle = int(process._handle)  # type: ignore[attr-defined]
        if not self._kernel32.AssignProcessToJobObject(self._job, handle):
            raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined]


_job_lock = threading.Lock()
_job: _WindowsJob | None = None


def _windows_job() -> _WindowsJob:
    global _job
    with _job_lock:
        if _job is None:
            _job = _WindowsJob()
        return _job
