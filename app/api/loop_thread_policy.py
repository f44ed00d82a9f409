"""The API loop's thread gives way on waking: Linux's SCHED_BATCH for it.

Between two steps the engine worker rings the loop (LoopDoorbell) and goes on into
llama_decode. On a machine whose cores all run llama.cpp's threads (ggml's other
threads spin between steps), the woken loop used to land on the worker's core and
preempt it there, and the client it wrote to after it: at one client on 2 cores
the worker stood 0.42-0.57 ms of a 9 ms token off its core, waiting
(docs/measurements.md, "Between two steps"). A SCHED_BATCH thread keeps its fair
share of the CPU but never preempts on waking, so the worker reaches llama_decode
first and the loop writes while the step computes. Other systems have no such
policy (Windows' lower priorities can starve a thread while compute runs); there
the thread keeps its default.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def give_way_on_waking() -> bool:
    """Put the calling thread (and threads it starts later) in SCHED_BATCH; whether it is.

    Any thread may choose SCHED_BATCH without privileges; a refusal (a sandbox that
    filters the call) leaves the thread as it was and is only logged."""
    batch = getattr(os, "SCHED_BATCH", None)
    if batch is None:
        return False
    try:
        os.sched_setscheduler(0, batch, os.sched_param(0))  # 0: the calling thread on Linux
    except OSError as error:
        log.info("the API loop keeps its scheduling policy: %s", error)
        return False
    return True
