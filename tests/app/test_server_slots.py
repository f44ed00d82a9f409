"""`shardchat serve`'s context: a KV stream of its own for each slot, as llama-server's slots
have, where the desktop app's clients share a pool beside the conversation
(engine.llama.load_params.KV_LAYOUT says why)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from api_server_fixtures import Serving, start_serving

from app.model_lifecycle.load_planning import ContextShape, planned_load
from engine.planning.plan import PlanRequest

QUESTION = "Why is the sky blue?"
OTHERS = ["Name three fruits.", "What do bakers need to make bread?", "How do birds fly?"]


@pytest.fixture(scope="module")
def serving(default_model_file: Path) -> Iterator[Serving]:
    started = start_serving(str(default_model_file), n_slots=4, n_ctx_per_slot=512)
    yield started
    started.close()


def test_serve_loads_a_stream_per_slot_of_the_slots_size(default_model_file: Path) -> None:
    shape = ContextShape.for_server(4, 2048)
    load = planned_load(str(default_model_file), 1024, None, shape=shape)
    assert not load.params.kv_unified
    assert load.params.n_ctx == 2048  # every stream is the window's size: at least a slot's
    assert ContextShape.of(load.params) == shape  # a model switch keeps the layout
    desktop = planned_load(str(default_model_file), 1024, None, shape=ContextShape.with_pool())
    assert desktop.params.kv_unified and desktop.params.n_ctx == 1024


def test_the_plan_counts_every_stream_the_layout_makes() -> None:
    pooled = PlanRequest(0, n_ctx=2048, parallel_sequences=4, shared_cells=4 * 2048)
    streams = PlanRequest(
        0, n_ctx=2048, parallel_sequences=4, shared_cells=4 * 2048, kv_unified=False
    )
    assert pooled.kv_cells == 5 * 2048
    # the conversation's, the 4 clients' and the one a batch job's opening is kept in
    assert streams.kv_cells == 6 * 2048


def streamed(serving: Serving, question: str) -> tuple[str, float, float]:
    """A greedy reply streamed: its text, and when its first and last pieces came."""
    stream = serving.client().chat.completions.create(
        model=serving.model_id,
        messages=[{"role": "user", "content": question}],
        temperature=0,
        max_tokens=48,
        stream=True,
    )
    parts: list[str] = []
    first = last = 0.0
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                last = time.monotonic()
                first = first or last
                parts.append(choice.delta.content)
    return "".join(parts), first, last


def test_a_clients_greedy_reply_is_the_same_alone_and_beside_others(serving: Serving) -> None:
    assert serving.loaded is not None and serving.loaded.load_params["kv_unified"] is False
    alone, _first, _last = streamed(serving, QUESTION)

    with ThreadPoolExecutor(len(OTHERS) + 1) as pool:
        replies = list(pool.map(lambda q: streamed(serving, q), [QUESTION, *OTHERS]))

    (beside, first, last), others = replies[0], replies[1:]
    # the others streamed while it did: one loop, so their tokens shared its steps
    assert any(o_first < last and first < o_last for _text, o_first, o_last in others)
    assert alone and beside == alone
