"""The one token loop: the same stream gives the same tokens whichever way it arrives, and
several streams share steps without changing each other's replies.

A text chat turn, a vision turn without images and a one-document batch job
all become one stream in a scheduler; greedy decoding of the same prompt
must give the same tokens through each. Streams that share steps (and the
one KV pool, engine.generation.decode_context) are compared with their solo
runs token by token: attention then runs over other sequences' (masked)
cells too, so sums are taken in another order and a near-tie may tip the
other way. Until it does the tokens' log-probabilities must agree closely,
and where it does the shared run's token must be the solo run's runner-up
by a hair; a stream that read another's cells would be far off.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from agreement import TOP, assert_agrees_with_solo, run_until_done

from engine.batch.generator import BatchGenerator, BatchRequest, BatchResult
from engine.cancel import CancelToken
from engine.errors import BadInputError
from engine.generation.decode_step import DecodeStep
from engine.generation.replies import generate
from engine.generation.sampling import GREEDY
from engine.generation.stats import FinishReason
from engine.generation.stream import Stream, StreamRequest
from engine.llama.load_params import LoadParams
from engine.model.chat_message import ChatMessage
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import LoadedModel, load_model
from engine.vision.runtime import attach_projector
from tests.synthetic_vision import write_synthetic_vlm

N_CTX = 512
REPLY = GREEDY.with_changes(max_tokens=24)
QUESTIONS = (
    "Name three colours of the sea.",
    "What do bakers need to make bread?",
    "Tell me about trains in one sentence.",
)


@pytest.fixture(scope="module")
def model(default_model_file: Path) -> Iterator[LoadedModel]:
    loaded = load_model(LoadParams(str(default_model_file), n_ctx=N_CTX, n_threads=1))
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoadedModel]:
    language, projector = write_synthetic_vlm(tmp_path_factory.mktemp("vlm"))
    loaded = load_model(LoadParams(str(language), n_ctx=N_CTX, n_threads=1))
    attach_projector(loaded, str(projector))
    yield loaded
    loaded.close()


def prompt_tokens(model: LoadedModel, question: str) -> list[int]:
    return model.tokenize_prompt(model.chat_template.render([ChatMessage("user", question)]))


def solo(model: LoadedModel, question: str) -> list[int]:
    """The stream alone in the model's own scheduler, from an empty cache."""
    return solo_stream(model, question).generated


def solo_stream(model: LoadedModel, question: str) -> Stream:
    request = replace(
        StreamRequest.of_tokens(prompt_tokens(model, question), REPLY, reuse_cache=False),
        top_logprobs=TOP,
    )
    stream = model.scheduler.admit(request, 0, seed=0)
    run_until_done(model.scheduler, [stream])
    return stream


def test_a_text_turn_a_vision_turn_and_a_batch_give_the_same_greedy_tokens(
    vlm: LoadedModel,
) -> None:
    question = QUESTIONS[0]
    tokens = solo(vlm, question)
    text_turn = ChatSession(vlm).reply(question, REPLY)
    assert vlm.vision is not None
    rendered = vlm.chat_template.render([ChatMessage("user", question)])
    vision_turn = "".join(
        r.text for r in vlm.vision.stream_reply(rendered, [], REPLY, CancelToken(), False)
    )
    results: list[BatchResult] = []
    with BatchGenerator(vlm, 1, N_CTX, share_prefix=False) as generator:
        generator.run([BatchRequest("doc", (ChatMessage("user", question),), 24)], results.append)
    assert len(tokens) >= 8
    assert list(results[0].token_ids) == tokens
    assert text_turn.text == vision_turn == results[0].text
    assert text_turn.stats.generated_tokens == len(tokens)


def test_streams_sharing_steps_agree_with_their_solo_runs(model: LoadedModel) -> None:
    alone = [solo_stream(model, q) for q in QUESTIONS]
    scheduler = model.scheduler
    steps: list[DecodeStep] = []
    scheduler.observers.append(steps.append)
    try:
        streams = [
            scheduler.admit(
                replace(StreamRequest.of_tokens(prompt_tokens(model, q), REPLY), top_logprobs=TOP),
                i, seed=0,
            )
            for i, q in enumerate(QUESTIONS)
        ]  # fmt: skip
        run_until_done(scheduler, streams)
    finally:
        scheduler.observers.remove(steps.append)
    for shared, single in zip(streams, alone, strict=True):
        assert_agrees_with_solo(shared.take_logprobs(), single.take_logprobs())
    assert max(step.n_sequences for step in steps) == len(QUESTIONS)
    assert len(steps) < sum(len(a.generated) for a in alone)  # the streams shared their steps


def test_a_cancelled_stream_ends_alone_and_the_others_go_on(model: LoadedModel) -> None:
    alone = solo_stream(model, QUESTIONS[1])
    cancel = CancelToken()
    scheduler = model.scheduler
    first = StreamRequest.of_tokens(prompt_tokens(model, QUESTIONS[0]), REPLY, cancel=cancel)
    second = replace(
        StreamRequest.of_tokens(prompt_tokens(model, QUESTIONS[1]), REPLY), top_logprobs=TOP
    )
    cancelled, going_on = scheduler.admit(first, 0, 0), scheduler.admit(second, 1, 0)
    while len(cancelled.generated) < 3:
        scheduler.step()
    cancel.cancel()
    ended = scheduler.step()
    assert ended[0] is cancelled and cancelled.finish is FinishReason.CANCELLED
    run_until_done(scheduler, [going_on])
    assert len(cancelled.generated) == 3
    assert_agrees_with_solo(going_on.take_logprobs(), alone.take_logprobs())


def test_the_next_turn_of_a_conversation_evaluates_only_what_changed(model: LoadedModel) -> None:
    session = ChatSession(model)
    first = session.reply(QUESTIONS[0], REPLY)
    second = session.reply(QUESTIONS[1], REPLY)
    assert first.stats.reused_prompt_tokens == 0
    assert second.stats.reused_prompt_tokens >= first.stats.prompt_tokens


def test_a_consumer_that_stops_listening_frees_its_sequence(model: LoadedModel) -> None:
    request = StreamRequest.of_tokens(prompt_tokens(model, QUESTIONS[2]), REPLY)
    replies = generate(model.scheduler, request, seed=0)
    next(replies)
    assert model.scheduler.active()
    replies.close()
    assert model.scheduler.active() == []
    assert solo(model, QUESTIONS[2])  # the sequence takes the next stream


def test_a_prompt_that_does_not_fit_is_refused_before_it_takes_a_sequence(
    model: LoadedModel,
) -> None:
    too_long = StreamRequest.of_tokens([1] * N_CTX, REPLY)
    with pytest.raises(BadInputError, match="the context holds"):
        model.scheduler.admit(too_long, 0, seed=0)
    assert model.scheduler.active() == []


def test_before_decode_runs_once_a_step_with_the_batch_built_and_not_yet_computed(
    model: LoadedModel,
) -> None:
    """What a server's loop is handed there runs while llama.cpp computes: the hook must
    come after the step is built (its tokens in the batch) and before it is computed."""
    scheduler = model.scheduler
    steps: list[DecodeStep] = []
    calls: list[tuple[int, int, list[int]]] = []  # (batch tokens, steps, KV ends) at each

    def before_decode() -> None:
        computed = [scheduler.context.last_position(seq) for seq in (0, 1)]
        calls.append((scheduler.context.n_tokens, len(steps), computed))

    scheduler.observers.append(steps.append)
    try:
        streams = [
            scheduler.admit(
                StreamRequest.of_tokens(prompt_tokens(model, q), REPLY, reuse_cache=False), i,
                seed=0,
            )
            for i, q in enumerate(QUESTIONS[:2])
        ]  # fmt: skip
        run_until_done(scheduler, streams, before_decode)
    finally:
        scheduler.observers.remove(steps.append)
    assert len(steps) > 10 and steps[0].n_prompt_tokens > 0
    assert [(n, made) for n, made, _ in calls] == [
        (step.n_tokens, made) for made, step in enumerate(steps)
    ]
    # the KV cache holds exactly what the steps before this one computed
    held = [sum(end + 1 for end in computed) for _, _, computed in calls]
    assert held == [sum(step.n_tokens for step in steps[:made]) for made in range(len(steps))]
