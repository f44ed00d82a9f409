"""The one context's sequences: the conversation goes first, the others share a pool of cells.

The model is loaded with a small shared pool, so that a stream's prompt and
reply can be refused room while another holds it, and with the conversation
decoding beside a long prompt, the steps that carry its token stay short.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import pytest

from engine.errors import ModelFileError, PromptTooLong
from engine.generation.decode_step import DecodeStep
from engine.generation.sampling import GREEDY
from engine.generation.scheduler import CONVERSATION, NoRoom, Scheduler
from engine.generation.step_budget import StepBudget
from engine.generation.stream import Stream, StreamRequest
from engine.llama.load_params import LoadParams
from engine.model.chat_message import ChatMessage
from engine.runtime.loaded_model import LoadedModel, load_model

POOL = 512  # cells the parallel sequences share
REPLY = GREEDY.with_changes(max_tokens=16)


@pytest.fixture(scope="module")
def model(default_model_file: Path) -> Iterator[LoadedModel]:
    params = LoadParams(
        str(default_model_file), n_ctx=1024, n_threads=1, n_parallel=3, n_ctx_shared=POOL
    )
    loaded = load_model(params)
    yield loaded
    loaded.close()


def prompt(model: LoadedModel, text: str) -> list[int]:
    return model.tokenize_prompt(model.chat_template.render([ChatMessage("user", text)]))


def request(tokens: list[int], max_tokens: int = 16) -> StreamRequest:
    return StreamRequest.of_tokens(tokens, REPLY.with_changes(max_tokens=max_tokens))


def run(scheduler: Scheduler, streams: list[Stream]) -> None:
    while not all(s.done for s in streams):
        scheduler.step()


def test_the_context_has_the_conversation_its_parallel_sequences_and_a_prefix_holder(
    model: LoadedModel,
) -> None:
    scheduler = model.scheduler
    assert scheduler.n_sequences == 3 + 2
    assert scheduler.room(CONVERSATION) == model.n_ctx == 1024
    assert scheduler.room(1) == POOL
    assert scheduler.pool_free() == POOL


def test_a_stream_waits_for_the_pools_cells_and_gets_them_when_another_ends(
    model: LoadedModel,
) -> None:
    scheduler = model.scheduler
    tokens = prompt(model, "Name three colours of the sea.")
    first = scheduler.admit(request(tokens, max_tokens=POOL - len(tokens) - 40), 1, seed=0)
    assert scheduler.pool_free() < len(tokens) + 17
    with pytest.raises(NoRoom):
        scheduler.admit(request(tokens), 2, seed=0)
    assert scheduler.slots[2] is None  # refused before it took the sequence
    scheduler.retire(first)
    scheduler.forget(1)
    second = scheduler.admit(request(tokens), 2, seed=0)
    run(scheduler, [second])
    assert second.generated


def test_idle_sequences_give_up_their_kept_cells_for_a_new_stream(model: LoadedModel) -> None:
    scheduler = model.scheduler
    tokens = prompt(model, "What do bakers need to make bread? Tell me in detail.")
    kept = scheduler.admit(request(tokens), 1, seed=0)
    run(scheduler, [kept])
    assert scheduler.held_length(1) > 0  # a returning client would find its opening here
    big = request(tokens, max_tokens=POOL - len(tokens) - 1)
    taker = scheduler.admit(big, 2, seed=0)
    assert scheduler.held_length(1) == 0  # let go, so the pool could hold the new stream
    scheduler.retire(taker)
    scheduler.forget(2)


def test_the_conversations_token_rides_every_step_while_a_long_prompt_is_fed_in_pieces(
    model: LoadedModel,
) -> None:
    scheduler = model.scheduler
    chat_tokens = prompt(model, "Tell me about trains.")
    long_tokens = prompt(model, " ".join(["The quick brown fox jumps over the lazy dog."] * 30))
    long_tokens = long_tokens[: POOL - 20]
    steps: list[DecodeStep] = []
    chat = scheduler.admit(request(chat_tokens, max_tokens=24), CONVERSATION, seed=0)
    while not chat.is_decoding:
        scheduler.step()
    scheduler.observers.append(steps.append)
    try:
        other = scheduler.admit(request(long_tokens, max_tokens=4), 1, seed=0)
        while not chat.done:
            before = len(chat.generated)
            scheduler.step()
            assert len(chat.generated) == before + 1  # never left out of a step
        run(scheduler, [other])
    finally:
        scheduler.observers.remove(steps.append)
    during_chat = steps[: len(chat.generated) - 1]
    assert max(step.n_prompt_tokens for step in during_chat) <= scheduler.composer.budget.most
    assert sum(step.n_prompt_tokens for step in during_chat) < len(long_tokens)  # in pieces
    assert other.generated


def test_the_budget_shrinks_when_steps_run_long_and_grows_back_when_they_do_not() -> None:
    budget = StepBudget(most=511)
    assert budget.wants_solo() and budget.take() == 0
    budget.record(0.010, companions=0)  # the conversation alone: 10 ms
    assert not budget.wants_solo()
    start = budget.tokens
    for _ in range(5):
        budget.record(0.030, companions=int(start))  # 3x its time alone, on average
    assert budget.tokens < start
    shrunk = budget.tokens
    for _ in range(30):
        budget.record(0.011, companions=1)
    assert budget.tokens > shrunk
    for _ in range(64):
        budget.record(0.011, companions=1)
    assert budget.wants_solo()  # time to measure the conversation alone again


def test_a_budget_under_one_token_lets_companions_ride_every_few_steps() -> None:
    budget = StepBudget(most=511)
    budget.record(0.010, companions=0)
    budget.tokens = 0.25
    granted = [budget.take() for _ in range(8)]
    assert sum(granted) == 2 and set(granted) == {0, 1}


def test_the_budget_saves_up_to_carry_every_decoding_companion_in_one_step() -> None:
    """Four companions decoding and a quarter token a step: one step in sixteen carries all
    four, not one companion in every fourth step (on a CPU, a step's second token costs as
    much as its first, and its fifth far less)."""
    budget = StepBudget(most=511)
    budget.record(0.010, companions=0)
    budget.tokens = 0.25
    granted = [budget.take(ready=4) for _ in range(32)]
    assert granted.count(4) == 2 and set(granted) == {0, 4}


def side_by_side(model: LoadedModel, tokens: list[int]) -> list[list[int]]:
    """Greedy replies of a parallel stream and the conversation, in the same steps."""
    streams = [model.scheduler.admit(request(tokens), seq, seed=0) for seq in (1, CONVERSATION)]
    run(model.scheduler, streams)
    for stream in streams:
        model.scheduler.retire(stream)
    return [stream.generated for stream in streams]


def test_a_context_without_a_pool_grows_one_on_the_same_weights_and_decodes_as_if_loaded_so(
    default_model_file: Path,
) -> None:
    """The pool sized on demand: a chat alone has no shared cells, and the context re-created
    with them (no weight read again) gives the tokens a context loaded with them gives."""
    params = LoadParams(
        str(default_model_file), n_ctx=1024, n_threads=1, n_parallel=3, n_ctx_shared=POOL
    )
    with_pool = load_model(params)
    try:
        tokens = prompt(with_pool, "Name three colours of the sea.")
        expected = side_by_side(with_pool, tokens)
    finally:
        with_pool.close()
    alone = load_model(params.with_changes(n_ctx_shared=0))
    try:
        assert alone.scheduler.room(1) == alone.scheduler.pool_free() == 0
        with pytest.raises(PromptTooLong):
            alone.scheduler.admit(request(tokens), 1, seed=0)
        weights = alone.handle.model
        seconds = alone.reshape(3, POOL)
        assert seconds > 0 and alone.handle.model == weights
        assert llama_cpp.llama_n_ctx(alone.handle.context) == 1024 + POOL
        assert alone.scheduler.room(1) == alone.scheduler.pool_free() == POOL
        assert side_by_side(alone, tokens) == expected
    finally:
        alone.close()


def test_a_context_is_reshaped_only_between_streams_and_a_refused_shape_leaves_it_working(
    default_model_file: Path,
) -> None:
    params = LoadParams(str(default_model_file), n_ctx=256, n_threads=1, n_parallel=1)
    small = load_model(params.with_changes(n_ctx_shared=0))
    try:
        tokens = prompt(small, "Hello")
        running = small.scheduler.admit(request(tokens), CONVERSATION, seed=0)
        with pytest.raises(RuntimeError, match="no stream runs"):
            small.reshape(1, POOL)
        run(small.scheduler, [running])
        small.scheduler.retire(running)
        with pytest.raises(ModelFileError, match="could not make a context"):
            small.reshape(1, 1 << 24)  # cells no machine has memory for
        assert small.params.n_ctx_shared == 0
        assert llama_cpp.llama_n_ctx(small.handle.context) == 256
        again = small.scheduler.admit(request(tokens), CONVERSATION, seed=0)
        run(small.scheduler, [again])
        assert again.generated == running.generated
    finally:
        small.close()


def test_the_conversations_prefill_uses_its_own_window_not_the_pool(
    default_model_file: Path,
) -> None:
    """A context without a pool still takes a prompt opening into the conversation's own
    window (the GPU tier's node check decodes that way); the pool's sequences have none."""
    params = LoadParams(str(default_model_file), n_ctx=256, n_threads=1, n_parallel=1)
    alone = load_model(params.with_changes(n_ctx_shared=0))
    try:
        tokens = tuple(prompt(alone, "Hello"))
        assert alone.scheduler.prefill(CONVERSATION, tokens, cancel=None)
        assert not alone.scheduler.prefill(1, tokens, cancel=None)
    finally:
        alone.close()
