"""Where a server's CPU goes while it serves: by thread, and by library through perf.

bench/api_throughput.py --profile brackets each timed window with one of these,
so that ShardChat and llama-server are split the same way side by side: the
compute threads (the --threads busiest: llama.cpp's thread 0, which in ShardChat
also runs the engine worker's Python, and ggml's others) against every other
thread of the server (ShardChat's HTTP loop, llama-server's HTTP threads), and,
where `perf record` may sample the server (root, or perf_event_paranoid at most
1), the same CPU split by the library its samples fell in. A step's compute
threads spin at ggml's barriers while one of them is switched out, so the split
says where the cores were, not only what was computed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import psutil

SAMPLES_PER_S = 999
# perf's library (dso) names, by what each holds; the first prefix that matches names it
LIBRARIES = (
    ("ggml compute", ("libggml-cpu",)),
    ("OpenMP", ("libgomp", "libomp")),
    ("Python", ("libpython", "python")),
    ("llama.cpp", ("libllama", "libggml", "libmtmd", "llama-server")),
    ("kernel", ("[kernel",)),
)
OTHER = "other (libc, libm, ...)"
COLUMNS = tuple(name for name, _ in LIBRARIES) + (OTHER,)


@dataclass
class CpuSplit:
    """CPU seconds a server used over one timed window."""

    compute_threads: float = 0.0
    other_threads: float = 0.0
    libraries: dict[str, float] = field(default_factory=dict)  # empty without perf

    @property
    def total(self) -> float:
        return self.compute_threads + self.other_threads


@dataclass(frozen=True)
class Profiling:
    """--profile: every timed window split, by library too where perf may sample."""

    sample: bool

    def of(self, pid: int, compute_threads: int, folder: Path) -> ServerCpu:
        return ServerCpu(pid, folder, compute_threads, self.sample)


def perf_usable() -> bool:
    """Whether perf can sample another process here."""
    if shutil.which("perf") is None:
        return False
    done = subprocess.run(
        ["perf", "record", "-q", "-o", os.devnull, "true"], capture_output=True, check=False
    )
    return done.returncode == 0


class ServerCpu:
    """One server's CPU over a window: `start()` and `stop()` bracket it, `split()` after.

    perf is attached before the window, disabled (--delay=-1), and switched on and
    off through its control FIFO, which acknowledges each switch: the samples are the
    window's, not the server's start or the warm-up request.
    """

    def __init__(self, pid: int, folder: Path, compute_threads: int, sample: bool) -> None:
        self._server = psutil.Process(pid)
        self._compute_threads = compute_threads
        self._data = folder / f"perf-{pid}.data"
        self._perf: subprocess.Popen[bytes] | None = None
        self._before: dict[int, float] = {}
        self._after: dict[int, float] = {}
        if sample:
            self._control, self._ack = folder / f"perf-{pid}.ctl", folder / f"perf-{pid}.ack"
            for fifo in (self._control, self._ack):
                os.mkfifo(fifo)
            self._perf = subprocess.Popen(
                ["perf", "record", "-q", "-F", str(SAMPLES_PER_S), "-p", str(pid), "--delay=-1",
                 "--control", f"fifo:{self._control},{self._ack}", "-o", str(self._data)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip

    def start(self) -> None:
        self._switch("enable")
        self._before = self._thread_seconds()

    def stop(self) -> None:
        self._after = self._thread_seconds()
        self._switch("disable")

    def split(self) -> CpuSplit:
        """The window's CPU by thread and, when sampled, by library; ends perf."""
        used = sorted(
            (seconds - self._before.get(tid, 0.0) for tid, seconds in self._after.items()),
            reverse=True,
        )
        split = CpuSplit(sum(used[: self._compute_threads]), sum(used[self._compute_threads :]))
        if self._perf is not None:
            self._perf.terminate()
            self._perf.wait(timeout=60)
            shares = library_shares(self._data)
            split.libraries = {name: share * split.total for name, share in shares.items()}
        return split

    def close(self) -> None:
        if self._perf is not None and self._perf.poll() is None:
            self._perf.kill()
            self._perf.wait()

    def _switch(self, command: str) -> None:
        if self._perf is None:
            return
        with open(self._control, "w", encoding="ascii") as control:
            control.write(command + "\n")
        with open(self._ack, encoding="ascii") as ack:
            ack.readline()

    def _thread_seconds(self) -> dict[int, float]:
        seconds: dict[int, float] = {}
        for process in (self._server, *self._server.children(recursive=True)):
            with contextlib.suppress(psutil.Error):
                for thread in process.threads():
                    seconds[thread.id] = thread.user_time + thread.system_time
        return seconds


def library_shares(data: Path) -> dict[str, float]:
    """Each library group's share of a perf recording's samples (all groups, summing to 1)."""
    report = subprocess.run(
        ["perf", "report", "-i", str(data), "--sort", "dso", "-n", "-q", "--stdio"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    samples = dict.fromkeys(COLUMNS, 0)
    for line in report.splitlines():
        parts = line.split(None, 2)  # "  84.79%   55183  libggml-cpu-zen4.so"
        if len(parts) == 3 and parts[1].isdigit():
            samples[library_of(parts[2].strip())] += int(parts[1])
    total = sum(samples.values())
    return {name: count / total for name, count in samples.items()} if total else {}


def library_of(dso: str) -> str:
    for name, prefixes in LIBRARIES:
        if dso.startswith(prefixes):
            return name
    return OTHER
