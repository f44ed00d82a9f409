"""Many real `shardchat` processes in little time, for signals sent at random moments.

Starting `shardchat` costs 2.4 s of CPU (5-6 s on a busy 2-core machine), nearly
all of it importing; a stopping test needs dozens of processes. So one helper
process imports the CLI once and forks a child per run: each child runs
`app.cli.main.main(argv)` with its own stdout, stderr and environment, then leaves
through `sys.exit` as the console script does, so Python's finalisers run as
they would (the crash this hunts for happened there). The helper is single-threaded
when it forks. It reports each child's pid, and its exit status when asked
(negative: the signal that killed it, as subprocess says).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_HELPER = r"""
import json, os, signal, sys, time
import app.cli.main

def child(run):
    for fd, name in ((0, os.devnull), (1, run["stdout"]), (2, run["stderr"])):
        target = os.open(name, os.O_RDWR | os.O_CREAT)
        os.dup2(target, fd)
        os.close(target)
    os.environ.update(run["env"])
    sys.argv = ["shardchat", *run["argv"]]
    sys.exit(app.cli.main.main(run["argv"]))

print("ready", flush=True)
for line in sys.stdin:
    run = json.loads(line)
    if "wait" in run:
        deadline = time.monotonic() + run["timeout"]
        pid, status = os.waitpid(run["wait"], os.WNOHANG)
        while pid == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
            pid, status = os.waitpid(run["wait"], os.WNOHANG)
        if pid == 0:  # still running: a hang
            os.kill(run["wait"], signal.SIGKILL)
            os.waitpid(run["wait"], 0)
            print("hang", flush=True)
        else:
            print(os.waitstatus_to_exitcode(status), flush=True)
        continue
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(run)
    print(pid, flush=True)
"""


@dataclass(frozen=True)
class Run:
    """One forked `shardchat` process: its pid and where its output goes."""

    pid: int
    stdout: Path
    stderr: Path

    def output(self) -> str:
        return self.stdout.read_text(encoding="utf-8", errors="replace")

    def errors(self) -> str:
        return self.stderr.read_text(encoding="utf-8", errors="replace")

    def wait_for_output(self, text: str, timeout: float = 120) -> None:
        """Until `text` appears on the child's stdout (it prints it when the event happens)."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{text!r} never came; stderr: {self.errors()[-2000:]}")
            time.sleep(0.02)


class CliForks:
    """The helper process; use as a context manager."""

    def __init__(self, workdir: Path) -> None:
        self._workdir = workdir
        self._count = 0
        self._helper = subprocess.Popen(
            [sys.executable, "-c", _HELPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, cwd=Path(__file__).resolve().parents[2],
        )  # fmt: skip
        assert self._read() == "ready"

    def __enter__(self) -> CliForks:
        return self

    def __exit__(self, *_exc: object) -> None:
        assert self._helper.stdin is not None
        self._helper.stdin.close()
        self._helper.wait(timeout=60)

    def start(self, argv: list[str], env: dict[str, str]) -> Run:
        self._count += 1
        out = self._workdir / f"run{self._count}.out"
        err = self._workdir / f"run{self._count}.err"
        out.touch()
        err.touch()
        self._send({"argv": argv, "env": env, "stdout": str(out), "stderr": str(err)})
        return Run(int(self._read()), out, err)

    def wait(self, run: Run, timeout: float = 60) -> int | None:
        """The child's exit code (negative: killed by that signal); None if it was still
        running after `timeout` seconds (it is killed then)."""
        self._send({"wait": run.pid, "timeout": timeout})
        answer = self._read()
        return None if answer == "hang" else int(answer)

    def _send(self, message: dict[str, object]) -> None:
        assert self._helper.stdin is not None
        self._helper.stdin.write(json.dumps(message) + "\n")
        self._helper.stdin.flush()

    def _read(self) -> str:
        assert self._helper.stdout is not None
        return self._helper.stdout.readline().strip()
