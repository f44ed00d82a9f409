"""The op-offload batch size a process's GPU backend runs with: chosen once, then fixed.

llama.cpp's GPU backends (CUDA, Vulkan, Metal, SYCL) read GGML_OP_OFFLOAD_MIN_BATCH
once, when ggml first lists its devices, and keep it for the life of the process:
from that many tokens per step on, ops on host weights run on the GPU (their
weights streamed over PCIe). A plan's boundary therefore takes effect only if it
is set before ggml starts; after that the boundary in force is the one ggml
started with, and a plan must be costed with that one (`engine.planning.planner.
with_offload_boundary`) so that what the step log predicts is what executes.

Every place of ours that makes ggml list its devices calls `note_ggml_start()`
first (the hardware probe, buffer types, loads, no-alloc simulations).
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger(__name__)

ENV = "GGML_OP_OFFLOAD_MIN_BATCH"
LLAMA_CPP_DEFAULT = 32

_lock = threading.Lock()
_started_with: int | None = None


def _from_environment() -> int:
    try:
        return int(os.environ.get(ENV, LLAMA_CPP_DEFAULT))
    except ValueError:
        return LLAMA_CPP_DEFAULT  # llama.cpp's atoi would read garbage as 0; we refuse it


def note_ggml_start() -> None:
    """ggml is about to list its devices: the boundary in the environment now is final."""
    global _started_with
    with _lock:
        if _started_with is None:
            _started_with = _from_environment()


def in_force() -> int | None:
    """The boundary the GPU backend runs with, or None while ggml has not started."""
    return _started_with


def request(min_batch: int) -> int:
    """Ask for `min_batch`; returns the boundary that will execute (the first one asked for
    before ggml started, else the one it started with)."""
    with _lock:
        if _started_with is None:
            os.environ[ENV] = str(min_batch)
            return min_batch
        if min_batch != _started_with:
            log.warning(
                "the GPU backend streams from %d tokens per step (fixed when it started); "
                "the plan asks for %d, which needs a restart of ShardChat",
                _started_with,
                min_batch,
            )
        return _started_with
