"""Helper processes (an RPC server, an ssh forward): started so that they end with this
process, and ended for sure without waiting long.

Nothing may stay lent or forwarded when ShardChat is gone, even killed (SIGKILL, a
crash) before it could stop its helpers. On Linux a helper asks the kernel for SIGTERM
when its parent goes (PR_SET_PDEATHSIG). The kernel means the parent *thread*, so a
helper is started from a thread of its own that lives exactly as long as the helper:
the window starts sharing from a worker thread that ends long before the server should.
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
