"""A shardchat child process on a pseudo-terminal (its stdin and stdout are TTYs), for the
tests of what only a terminal shows: an interactive chat, Ctrl-C at the prompt."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

SHARDCHAT = str(Path(sys.executable).parent / "shardchat")
ROOT = Path(__file__).resolve().parents[2]


class Terminal:
    """A child process on a pseudo-terminal, read until expected text shows up."""

    def __init__(
        self, *args: str, argv: list[str] | None = None, environ: dict[str, str] | None = None
    ) -> None:
        """`shardchat ARGS`, or the command `argv` (run from the repository's root), with
        this environment or `environ`."""
        command = argv or [SHARDCHAT, *args]
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child becomes the command
            os.chdir(ROOT)
            os.execve(command[0], command, environ if environ is not None else dict(os.environ))
        self.screen = ""

    def expect(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.screen:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"timed out waiting for {text!r}; screen:\n{self.screen}"
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if ready:
                self.screen += os.read(self.fd, 4096).decode("utf-8", errors="replace")
        seen, self.screen = self.screen.split(text, 1)
        return seen

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def exit_code(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            self._drain()
        raise AssertionError(f"the command did not exit; screen:\n{self.screen}")

    def _drain(self) -> None:
        ready, _, _ = select.select([self.fd], [], [], 0.1)
        if ready:
            with contextlib.suppress(OSError):  # the child closed the terminal
                self.screen += os.read(self.fd, 4096).decode("utf-8", errors="replace")

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *_exc: object) -> None:
        """Never leave the command behind, even when an expectation failed."""
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        os.close(self.fd)
