"""Ending a helper process (an RPC server, an ssh forward) for sure, without waiting long."""

from __future__ import annotations

import subprocess

GRACE_S = 5.0


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
