"""Running one risky measurement in a child process, with a timeout.

A profiling configuration can crash llama.cpp (an unsupported buffer type,
a kernel that faults on this CPU) or hang. In a child process that costs
the configuration, not the app: the parent records why it failed and goes
on. The child is a fresh interpreter (`python -m engine.child_process`), so
nothing of the parent's threads, locks or `__main__` leaks into it; the
request and the answer travel as pickle files in a private folder.
"""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.cancel import CancelToken
from engine.errors import ShardChatError

_POLL_S = 0.05
_STDERR_TAIL = 300


class Cancelled(ShardChatError):
    """The caller cancelled while a child was running; the child has been killed."""


@dataclass(frozen=True)
class ChildOutcome:
    """The child's return value, or why there is none."""

    value: Any = None
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


def run_in_child(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    timeout_s: float,
    cancel: CancelToken | None = None,
    label: str = "child",
) -> ChildOutcome:
    """Call the module-level `function(*args)` in a fresh process; the result must pickle.

    `label` names the child's request folder, which its command line shows (ps, tests).
    """
    with tempfile.TemporaryDirectory(prefix=f"shardchat-{label}-") as folder:
        request, answer, errors = (Path(folder) / n for n in ("request", "answer", "stderr"))
        request.write_bytes(pickle.dumps((function, args)))
        with errors.open("wb") as stderr:
            child = subprocess.Popen(
                [sys.executable, "-m", "engine.child_process", str(request), str(answer)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
            try:
                failure = _wait(child, timeout_s, cancel)
            finally:
                if child.poll() is None:
                    child.kill()
                child.wait()
        return _outcome(failure, answer, errors)


def _wait(
    child: subprocess.Popen[bytes], timeout_s: float, cancel: CancelToken | None
) -> str | None:
    deadline = time.monotonic() + timeout_s
    while child.poll() is None:
        if cancel is not None and cancel.cancelled:
            child.kill()
            raise Cancelled("cancelled")
        if time.monotonic() > deadline:
            return f"timed out after {timeout_s:.0f} s"
        time.sleep(_POLL_S)
    return death_reason(child.returncode) if child.returncode != 0 else None


def _outcome(failure: str | None, answer: Path, errors: Path) -> ChildOutcome:
    if failure is None and answer.exists():
        status, payload = pickle.loads(answer.read_bytes())
        return ChildOutcome(value=payload) if status == "ok" else ChildOutcome(failure=payload)
    failure = failure or "the child exited without an answer"
    tail = errors.read_text(errors="replace").strip()[-_STDERR_TAIL:]
    last_line = tail.splitlines()[-1] if tail else ""
    return ChildOutcome(failure=f"{failure}: {last_line}" if last_line else failure)


def death_reason(returncode: int) -> str:
    if returncode < 0:
        number = -returncode
        name = signal.Signals(number).name if number in signal.valid_signals() else "?"
        return f"crashed (signal {number}, {name})"
    return f"exited with code {returncode}"


def _child_main(request: Path, answer: Path) -> int:
    function, args = pickle.loads(request.read_bytes())
    try:
        result: tuple[str, Any] = ("ok", function(*args))
    except Exception as exc:  # the failure is the answer
        result = ("error", f"{type(exc).__name__}: {exc}")
    partial = answer.with_suffix(".part")
    partial.write_bytes(pickle.dumps(result))
    partial.replace(answer)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(Path(sys.argv[1]), Path(sys.argv[2])))
