"""How many staging slots a context's scheduler streams weights through (0: serially).

ShardChat's llama.cpp carries a scheduler patch
(installer/patches/llama-cpp-python-*-streamed-weights-prefetch.patch): where a
prompt step runs host-resident weights on the GPU, it uploads them through a
second queue of the same device into N rotating staging slots, up to N-1 splits
ahead of the compute that needs them, instead of copying each one while the GPU
waits. llama.cpp takes its backend tuning from the environment (GGML_VK_*,
GGML_CUDA_*, GGML_OP_OFFLOAD_MIN_BATCH) and so does the patch:
GGML_SCHED_PREFETCH_SLOTS, read when a context creates its scheduler. Unlike the
op-offload boundary it is read per context, so `slots_for_contexts` sets it only
around the creation of the contexts a plan asked for and puts the old value back.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

ENV = "GGML_SCHED_PREFETCH_SLOTS"
MAX_SLOTS = 8  # the patch's GGML_SCHED_MAX_PREFETCH_SLOTS; one slot uploads nothing ahead

_lock = threading.Lock()


def check_slots(slots: int) -> int:
    """The patch treats fewer than 2 slots as off: 1 would be a silent no-op, so it is refused."""
    if slots != 0 and not 2 <= slots <= MAX_SLOTS:
        raise ValueError(f"prefetch slots must be 0 (serial) or 2 to {MAX_SLOTS}, not {slots}")
    return slots


@contextlib.contextmanager
def slots_for_contexts(slots: int) -> Iterator[None]:
    """Contexts created in this block stream their weights through `slots` slots."""
    check_slots(slots)
    with _lock:  # one creation at a time sees the value (the engine thread makes them all)
        before = os.environ.get(ENV)
        os.environ[ENV] = str(slots)
        try:
            yield
        finally:
            if before is None:
                del os.environ[ENV]
            else:
                os.environ[ENV] = before
