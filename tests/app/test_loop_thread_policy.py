"""The API loop's thread runs in SCHED_BATCH on Linux: it never preempts the engine worker
when the worker rings it just before llama_decode (app/api/loop_thread_policy.py)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from api_server_fixtures import Serving, start_serving

from app.api.loop_thread_policy import give_way_on_waking

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="SCHED_BATCH is Linux's"
)


@pytest.fixture(scope="module")
def serving(default_model_file: Path) -> Iterator[Serving]:
    started = start_serving(str(default_model_file), n_slots=1, n_ctx_per_slot=512)
    yield started
    started.close()


def _policy_in_thread(work: object) -> tuple[object, int, int]:
    """What `work()` returned in a new thread, that thread's policy after, and the policy of
    a thread that thread started."""
    seen: list[object] = []

    def child() -> None:
        seen.append(os.sched_getscheduler(0))

    def run() -> None:
        seen.append(work())  # type: ignore[operator]
        seen.append(os.sched_getscheduler(0))
        started = threading.Thread(target=child)
        started.start()
        started.join()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    returned, own, inherited = seen
    assert isinstance(own, int) and isinstance(inherited, int)
    return returned, own, inherited


@linux_only
def test_the_thread_that_asks_is_batch_and_so_are_the_threads_it_starts() -> None:
    returned, own, inherited = _policy_in_thread(give_way_on_waking)
    assert returned is True
    assert own == os.SCHED_BATCH
    assert inherited == os.SCHED_BATCH


@linux_only
def test_only_the_thread_that_asks_changes() -> None:
    before = os.sched_getscheduler(0)
    _policy_in_thread(give_way_on_waking)
    assert os.sched_getscheduler(0) == before == os.SCHED_OTHER


@linux_only
def test_the_servers_loop_thread_is_batch_and_the_engine_worker_is_not(
    serving: Serving,
) -> None:
    threads = {thread.name: thread for thread in threading.enumerate()}
    loop, worker = threads["shardchat-api"], threads["shardchat-engine"]
    assert loop.native_id is not None and worker.native_id is not None
    assert os.sched_getscheduler(loop.native_id) == os.SCHED_BATCH
    assert os.sched_getscheduler(worker.native_id) == os.SCHED_OTHER
    reply = serving.client().chat.completions.create(
        model=serving.model_id, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
    )
    assert reply.choices[0].message.content
