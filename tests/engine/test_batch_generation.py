"""The batched engine with the default model: outputs, refilling, limits, cancel, prefix, cells.

A batch job's documents are sequences of the model's one context, stepped
together (and beside the conversation). Their greedy replies are compared
with the same prompts alone in the same scheduler (tests/engine/agreement.py
says why "the same" allows a near-tie to tip the other way: a step of four
sequences sums in another order than a step of one).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from agreement import assert_tokens_agree_with_solo, run_until_done, solo_logprobs

from engine.batch.generator import BatchGenerator, BatchRequest, BatchResult, DecodeStep
from engine.cancel import CancelToken
from engine.errors import BadInputError
from engine.generation.logprobs import TokenLogprob
from engine.generation.sampling import GREEDY
from engine.generation.scheduler import CONVERSATION
from engine.generation.stream import StreamRequest
from engine.llama.load_params import LoadParams
from engine.machine.profile import Profile
from engine.model.chat_message import ChatMessage
from engine.model.default_model import default_model_path
from engine.model.inventory import read_inventory
from engine.planning.plan import Objective, Plan, PlanRequest
from engine.planning.planner import make_plan
from engine.runtime.loaded_model import LoadedModel, load_model

SYSTEM = ChatMessage("system", "You are a concise assistant. Answer in plain English.")
TOPICS = ("the sea", "a mountain village", "baking bread", "a lost cat", "trains", "the moon")
N_CTX = 512
RECORDED = Path(__file__).resolve().parents[1] / "data" / "profile-epyc-2core-fast.json"


def request(key: str, text: str, max_tokens: int = 24) -> BatchRequest:
    return BatchRequest(key, (SYSTEM, ChatMessage("user", text)), max_tokens)


def questions(max_tokens: int = 24) -> list[BatchRequest]:
    return [request(f"q{i}", f"Write two sentences about {t}.", max_tokens)
            for i, t in enumerate(TOPICS)]  # fmt: skip


def stories(lengths: list[int]) -> list[BatchRequest]:
    """Prompts the model answers at length, each with its own reply limit."""
    return [
        request(f"s{i}", f"Write a long, detailed story about {TOPICS[i % len(TOPICS)]}.", n)
        for i, n in enumerate(lengths)
    ]


def run_all(
    model: LoadedModel, requests: list[BatchRequest], n_parallel: int, **options: object
) -> tuple[dict[str, BatchResult], list[BatchResult]]:
    results: list[BatchResult] = []
    with BatchGenerator(model, n_parallel, N_CTX, **options) as generator:  # type: ignore[arg-type]
        generator.run(requests, results.append)
    return {r.key: r for r in results}, results


@pytest.fixture(scope="module")
def default_model() -> Iterator[LoadedModel]:
    """The default model on one thread (see the module docstring), shadowing conftest's."""
    model = load_model(LoadParams(str(default_model_path()), n_ctx=N_CTX, n_threads=1))
    yield model
    model.close()


@pytest.fixture(scope="module")
def cpu_plan(default_model_file: Path) -> Plan:
    profile = Profile.from_json(RECORDED.read_text())
    request = PlanRequest(0, n_ctx=N_CTX, n_parallel=4, objective=Objective.BATCH)
    return make_plan(read_inventory(default_model_file), profile, request)


@pytest.fixture(scope="module")
def sequential(default_model: LoadedModel) -> dict[str, BatchResult]:
    by_key, _ = run_all(default_model, questions(), 1, share_prefix=False)
    return by_key


@pytest.fixture(scope="module")
def alone(default_model: LoadedModel) -> dict[str, list[TokenLogprob]]:
    """Each question's greedy reply alone in one sequence, with its log-probabilities."""
    scheduler = default_model.scheduler
    return {
        item.key: solo_logprobs(scheduler, prompt_of(default_model, item), item.max_tokens)
        for item in questions()
    }


def prompt_of(model: LoadedModel, item: BatchRequest) -> list[int]:
    return model.tokenize_prompt(model.chat_template.render(item.messages))


def assert_replies_agree(
    replies: dict[str, BatchResult], alone: dict[str, list[TokenLogprob]]
) -> None:
    assert replies.keys() == alone.keys()
    for key, reply in replies.items():
        assert_tokens_agree_with_solo(reply.token_ids, alone[key])


def test_batched_greedy_replies_agree_with_each_prompt_alone(
    default_model: LoadedModel, alone: dict[str, list[TokenLogprob]]
) -> None:
    batched, results = run_all(default_model, questions(), 4, share_prefix=False)
    assert len(results) == len(TOPICS) == len(batched)
    assert all(r.finish_reason in ("stop", "length") and r.text.strip() for r in results)
    assert_replies_agree(batched, alone)


def test_one_sequence_at_a_time_gives_exactly_the_solo_tokens(
    sequential: dict[str, BatchResult], alone: dict[str, list[TokenLogprob]]
) -> None:
    """One sequence alone sums as a stream alone does: no near-tie may tip."""
    assert {k: list(r.token_ids) for k, r in sequential.items()} == {
        k: [t.token for t in logprobs] for k, logprobs in alone.items()
    }


def test_every_request_ends_once_under_its_own_key_and_limit(default_model: LoadedModel) -> None:
    """More requests than slots: freed slots are refilled, the iterable is read lazily."""
    lengths = [3, 9, 5, 12, 4, 7, 6]
    pulled: list[str] = []
    pulled_at_first_result: list[int] = []

    def lazily() -> Iterator[BatchRequest]:
        for item in stories(lengths):
            pulled.append(item.key)
            yield item

    results: list[BatchResult] = []

    def collect(result: BatchResult) -> None:
        if not results:
            pulled_at_first_result.append(len(pulled))
        results.append(result)

    with BatchGenerator(default_model, 2, N_CTX) as generator:
        stats = generator.run(lazily(), collect)
    assert sorted(r.key for r in results) == sorted(f"s{i}" for i in range(len(lengths)))
    for result in results:
        limit = lengths[int(result.key[1:])]
        assert (result.finish_reason, result.generated_tokens) == ("length", limit)
        assert len(result.token_ids) == limit
    assert pulled_at_first_result == [2]
    assert stats.n_results == len(lengths)
    assert stats.generated_tokens == sum(lengths)
    assert stats.finish_reasons == {"length": len(lengths)}


def test_one_token_limit(default_model: LoadedModel) -> None:
    by_key, _ = run_all(default_model, questions(max_tokens=1), 3)
    assert {(r.generated_tokens, r.finish_reason) for r in by_key.values()} <= {
        (1, "length"),
        (1, "stop"),
    }


def test_shared_prefix_is_evaluated_once_and_keeps_the_replies(
    default_model: LoadedModel, alone: dict[str, list[TokenLogprob]]
) -> None:
    results: list[BatchResult] = []
    with BatchGenerator(default_model, 3, N_CTX, share_prefix=True) as generator:
        shared = generator.run(questions(), results.append)
    with BatchGenerator(default_model, 3, N_CTX, share_prefix=False) as generator:
        unshared = generator.run(questions(), lambda _r: None)
    system_tokens = default_model.count_tokens([SYSTEM])
    assert unshared.reused_prompt_tokens == 0
    assert all(r.reused_prompt_tokens >= system_tokens - 2 for r in results)
    assert shared.reused_prompt_tokens == sum(r.reused_prompt_tokens for r in results)
    # the prefix is evaluated once, in its own sequence, instead of once per prompt
    prefix = results[0].reused_prompt_tokens
    assert shared.evaluated_prompt_tokens == unshared.evaluated_prompt_tokens - 6 * prefix + prefix
    assert_replies_agree({r.key: r for r in results}, alone)


def test_prompt_too_long_for_a_sequence_fails_alone(default_model: LoadedModel) -> None:
    long_text = "Summarise this: " + "the quick brown fox jumps over the lazy dog. " * 80
    requests = [*questions()[:2], request("long", long_text), *questions()[2:3]]
    with BatchGenerator(default_model, 2, 256) as generator:
        results: list[BatchResult] = []
        stats = generator.run(requests, results.append)
    by_key = {r.key: r for r in results}
    failed = by_key["long"]
    assert failed.finish_reason == "error"
    assert failed.error and "\n" not in failed.error and "tokens" in failed.error
    assert failed.text == "" and failed.generated_tokens == 0 and failed.prompt_tokens > 256
    others = [r for r in results if r.key != "long"]
    assert len(others) == 3 and all(r.finish_reason in ("stop", "length") for r in others)
    assert all(r.error is None and r.text for r in others)
    assert stats.finish_reasons["error"] == 1


def test_a_prompt_the_template_cannot_render_fails_alone(default_model: LoadedModel) -> None:
    broken = BatchRequest("broken", (SYSTEM, ChatMessage("user", None)), 8)  # type: ignore[arg-type]
    by_key, results = run_all(default_model, [broken, *questions(8)[:2]], 2)
    assert by_key["broken"].finish_reason == "error"
    assert "could not be rendered" in (by_key["broken"].error or "")
    assert "\n" not in (by_key["broken"].error or "")
    assert [r.finish_reason for r in results].count("error") == 1


def test_cancel_between_steps_ends_what_is_in_flight(default_model: LoadedModel) -> None:
    cancel = CancelToken()
    steps: list[DecodeStep] = []
    pulled: list[str] = []

    def on_step(step: DecodeStep) -> None:
        steps.append(step)
        if len(steps) == 6:
            cancel.cancel()

    def lazily() -> Iterator[BatchRequest]:
        for item in stories([200] * 6):
            pulled.append(item.key)
            yield item

    results: list[BatchResult] = []
    with BatchGenerator(default_model, 2, N_CTX) as generator:
        generator.run(lazily(), results.append, cancel, on_step)
    assert len(steps) == 6  # no step after the cancel
    assert pulled == ["s0", "s1"]  # nothing more read from the iterable
    assert sorted(r.key for r in results) == ["s0", "s1"]
    assert all(r.finish_reason == "cancelled" for r in results)
    assert all(0 < r.generated_tokens < 200 and r.text for r in results)


def test_cancel_during_a_long_prompt_step_aborts_llama_decode(
    default_model: LoadedModel,
) -> None:
    """A 450-token prompt chunk takes seconds on one thread; the cancel lands inside it."""
    long_text = "Summarise this: " + "the quick brown fox jumps over the lazy dog. " * 40
    cancel = CancelToken()

    def cancel_soon() -> Iterator[BatchRequest]:
        threading.Timer(0.1, cancel.cancel).start()  # the step starts right after this
        yield request("long", long_text, 8)

    steps: list[DecodeStep] = []
    results: list[BatchResult] = []
    with BatchGenerator(default_model, 1, N_CTX, share_prefix=False) as generator:
        stats = generator.run(cancel_soon(), results.append, cancel, steps.append)
    assert [r.finish_reason for r in results] == ["cancelled"]
    assert results[0].generated_tokens == 0 and results[0].text == ""
    assert len(steps) == 1 and steps[0].aborted and steps[0].n_prompt_tokens > 300
    assert stats.evaluated_prompt_tokens == 0


def test_a_chat_turn_rides_the_batch_steps_and_neither_disturbs_the_other(
    default_model: LoadedModel, alone: dict[str, list[TokenLogprob]]
) -> None:
    """The conversation's turn joins a running batch in sequence 0 of the same context."""
    scheduler = default_model.scheduler
    chat_prompt = default_model.tokenize_prompt(
        default_model.chat_template.render([ChatMessage("user", "Hello!")])
    )
    chat_alone = solo_logprobs(scheduler, chat_prompt, 12, seq_id=CONVERSATION)
    twelve = GREEDY.with_changes(max_tokens=12)
    results: list[BatchResult] = []
    steps: list[DecodeStep] = []
    with BatchGenerator(default_model, 3, N_CTX, share_prefix=False) as generator:
        batch_run = generator.start(questions(), results.append, on_step=steps.append)
        chat = None
        while batch_run.admit():
            if chat is None and len(steps) == 3:
                request = StreamRequest.of_tokens(chat_prompt, twelve, reuse_cache=False)
                chat = scheduler.admit(request, CONVERSATION, seed=0)
            scheduler.step()
            batch_run.collect()
        assert chat is not None
        run_until_done(scheduler, [chat])
    assert chat.generated and chat.finish is not None
    assert_tokens_agree_with_solo(chat.generated, chat_alone)
    assert_replies_agree({r.key: r for r in results}, alone)
    assert any(s.n_sequences == 4 for s in steps)  # the chat's token rode with three documents


def test_top_k_one_sampling_is_greedy(
    default_model: LoadedModel, sequential: dict[str, BatchResult]
) -> None:
    settings = GREEDY.with_changes(temperature=0.9, top_k=1, top_p=0.9)
    by_key, _ = run_all(default_model, questions(), 1, settings=settings, share_prefix=False)
    assert {k: r.token_ids for k, r in by_key.items()} == {
        k: r.token_ids for k, r in sequential.items()
    }


def test_steps_report_size_sequences_and_plan_tier(
    default_model: LoadedModel, cpu_plan: Plan
) -> None:
    steps: list[DecodeStep] = []
    with BatchGenerator(default_model, 4, N_CTX, plan=cpu_plan) as generator:
        stats = generator.run(questions(max_tokens=8), lambda _r: None, on_step=steps.append)
    assert len(steps) == stats.steps > 8
    assert all(s.tier == cpu_plan.tier_for(s.n_tokens) for s in steps)
    assert any(s.n_sequences == 4 and s.n_prompt_tokens == 0 and s.n_tokens == 4 for s in steps)
    assert sum(s.n_prompt_tokens for s in steps) == stats.evaluated_prompt_tokens
    assert stats.prompt_seconds > 0 and stats.decode_seconds > 0
    assert stats.wall_seconds >= stats.prompt_seconds + stats.decode_seconds


def test_close_lets_go_of_the_cells(default_model: LoadedModel) -> None:
    scheduler = default_model.scheduler
    generator = BatchGenerator(default_model, 3, N_CTX)
    generator.run(questions(max_tokens=4), lambda _r: None)
    kept = [generator.holder, *generator.sequences]
    assert sum(scheduler.held_length(i) for i in kept) > 100  # the prefix and the replies
    assert scheduler.pool_free() < scheduler.context.shared_cells
    generator.close()
    assert [scheduler.held_length(i) for i in kept] == [0] * len(kept)
    assert scheduler.pool_free() == scheduler.context.shared_cells
    assert generator.closed
    generator.close()  # twice is harmless
    with pytest.raises(RuntimeError, match="closed"):
        generator.run(questions(), lambda _r: None)


def test_impossible_shapes_are_refused(default_model: LoadedModel) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        BatchGenerator(default_model, 0, N_CTX)
    trained = default_model.inventory.context_length
    assert trained
    with pytest.raises(BadInputError, match="trained for"):
        BatchGenerator(default_model, 1, trained + 1)


def test_more_sequences_than_a_step_holds_are_refused_at_load() -> None:
    """Every decoding sequence puts a token in each step, so n_batch must hold them all."""
    with pytest.raises(ValueError, match="n_batch"):
        LoadParams(str(default_model_path()), n_ctx=256, n_batch=8, n_ubatch=8, n_parallel=8)
    LoadParams(str(default_model_path()), n_ctx=256, n_batch=8, n_ubatch=8, n_parallel=7)


def test_a_run_driven_step_by_step_ends_and_a_newer_run_retires_it(
    default_model: LoadedModel, alone: dict[str, list[TokenLogprob]]
) -> None:
    scheduler = default_model.scheduler
    results: list[BatchResult] = []
    with BatchGenerator(default_model, 3, N_CTX, share_prefix=False) as generator:
        batch_run = generator.start(questions(), results.append)
        steps = 0
        while batch_run.admit():
            scheduler.step()
            batch_run.collect()
            steps += 1
        assert batch_run.done and not batch_run.admit()
        assert steps == batch_run.stats.steps
        older = generator.start(questions(), lambda _r: None)
        assert older.admit()
        generator.start(questions(), lambda _r: None)
        with pytest.raises(RuntimeError, match="replaced"):
            older.admit()
    assert sorted(r.key for r in results) == sorted(alone)
    assert all(r.finish_reason in ("stop", "length") for r in results)
