"""The shared KV pool, made when an activity needs it: the window's load has none, and the
API's first client or a summary job re-creates the context with it, re-planned, without
reading the weights again (engine: tests/engine/test_shared_context.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from api_server_fixtures import Serving, start_serving

from app.engine_host.events import JobFinished, PlanChanged, ReplyFinished
from app.model_lifecycle.load_planning import ContextShape
from app.stores.job_store import DONE
from app.summaries.summary_job import SummarySettings
from engine.generation.sampling import GREEDY
from engine.llama.load_params import DEFAULT_SHARED_CELLS
from engine.machine.profile import Profile

QUESTION = [{"role": "user", "content": "Name a colour of the sea."}]


def serve(model: Path, profile: Profile, shape: ContextShape) -> Serving:
    return start_serving(str(model), n_slots=2, n_ctx_per_slot=1024, profile=profile, shape=shape)


@pytest.fixture
def window(default_model_file: Path, recorded_profile_here: Profile) -> Iterator[Serving]:
    """The model as the window loads it: no shape named, so no shared cells."""
    started = serve(default_model_file, recorded_profile_here, ContextShape())
    yield started
    started.close()


def api_answer(serving: Serving) -> str:
    reply = serving.client().chat.completions.create(
        model=serving.model_id, messages=QUESTION, temperature=0, max_tokens=12
    )
    return str(reply.choices[0].message.content)


def pool_made(serving: Serving) -> PlanChanged:
    """The engine's own re-plan (request 0) that made the pool."""
    while not isinstance(event := serving.events.get(timeout=60), PlanChanged):
        pass
    assert event.request_id == 0
    return event


def test_the_first_api_client_makes_the_pool_and_is_answered_as_by_a_context_loaded_with_it(
    window: Serving, default_model_file: Path, recorded_profile_here: Profile
) -> None:
    assert window.loaded is not None
    assert window.loaded.load_params["n_ctx_shared"] == 0
    assert window.loaded.plan.request.shared_cells == 0  # the plan counts no idle cell
    before = window.wait_for(
        window.worker.send_message("Say hello.", GREEDY.with_changes(max_tokens=8))
    )
    assert isinstance(before, ReplyFinished)

    answer = api_answer(window)
    made = pool_made(window)
    assert not made.reloaded  # budget 0: nothing moves, the context alone is re-created
    assert made.plan.request.shared_cells == DEFAULT_SHARED_CELLS
    assert made.plan.vram.kv_cache_bytes == 0  # a CPU plan: the cells are RAM
    assert api_answer(window) == answer  # the pool is made once

    # the conversation goes on in the new context, evaluated again from its messages
    again = window.wait_for(
        window.worker.send_message("Say hello.", GREEDY.with_changes(max_tokens=8))
    )
    assert isinstance(again, ReplyFinished) and again.text

    with_pool = serve(default_model_file, recorded_profile_here, ContextShape.with_pool())
    try:
        assert api_answer(with_pool) == answer
    finally:
        with_pool.close()


def test_a_summary_job_waits_for_the_conversations_turn_makes_the_pool_and_runs(
    window: Serving, tmp_path: Path
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for n in range(2):
        (folder / f"doc{n}.txt").write_text(f"Note {n}. The ferry leaves at nine every day. " * 6)
    turn = window.worker.send_message("Count to twenty.", GREEDY.with_changes(max_tokens=48))
    settings = SummarySettings(max_words=20, parallel=2, n_ctx_per_sequence=512)
    job = window.worker.summarize(folder, tmp_path / "out", settings)
    reply = window.wait_for(turn)
    assert isinstance(reply, ReplyFinished) and reply.text  # not cut by the re-created context
    made = pool_made(window)
    assert made.plan.request.shared_cells == DEFAULT_SHARED_CELLS
    finished = window.wait_for(job)
    assert isinstance(finished, JobFinished)
    outcome = finished.outcome
    assert not outcome.cancelled
    assert [(r.path, r.status) for r in outcome.records] == [("doc0.txt", DONE), ("doc1.txt", DONE)]
