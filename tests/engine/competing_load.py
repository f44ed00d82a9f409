"""Other programs keeping every core busy, for tests of a profile measured on a busy machine.

The loops are real processes, started through a shell that exits at once, so
they are not descendants of the test's process: to the profiler they are
another program, as a browser or a compiler would be. They are killed by
pid (psutil checks the start time, so a reused pid is never hit).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

_LOOP = "while True: pass"


@contextmanager
def competing_load(per_core: int = 1) -> Iterator[list[psutil.Process]]:
    """`per_core` busy loops on every logical CPU while the block runs."""
    loops: list[psutil.Process] = []
    try:
        for _ in range(per_core * (os.cpu_count() or 1)):
            loops.append(_detached_loop())
        yield loops
    finally:
        for loop in loops:
            try:
                loop.kill()
            except psutil.NoSuchProcess:
                continue


def _detached_loop() -> psutil.Process:
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(_LOOP)} </dev/null >/dev/null 2>&1 &"
    started = subprocess.run(
        ["sh", "-c", f"{command} echo $!"], capture_output=True, text=True, check=True, timeout=10
    )
    return psutil.Process(int(started.stdout))
