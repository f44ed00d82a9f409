"""Waiting prompts finish a group at a time: the group size minimises their mean time to
first token under the fitted step cost, and a burst of streams agrees with its solo runs
(tests/engine/agreement.py: a step of several prompts sums in another order than one of
one) while the first of them get their tokens sooner.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from agreement import TOP, assert_agrees_with_solo, run_until_done

from engine.generation.decode_step import DecodeStep
from engine.generation.prompt_groups import StepCostFit, prompts_to_finish
from engine.generation.sampling import GREEDY
from engine.generation.stream import Stream, StreamRequest
from engine.llama.load_params import LoadParams
from engine.model.chat_message import ChatMessage
from engine.runtime.loaded_model import LoadedModel, load_model

FIXED_S, PER_TOKEN_S = 0.013, 0.0027  # a 2-core step of the default model: 13 ms + 2.7 ms/token


def fitted(sizes: list[int]) -> StepCostFit:
    fit = StepCostFit()
    for n in sizes:
        fit.record(n, FIXED_S + PER_TOKEN_S * n)
    return fit


def test_the_fit_finds_a_steps_fixed_cost_in_tokens() -> None:
    sizes = [1] * 60 + [37, 512, 74, 13]
    assert fitted(sizes).fixed_in_tokens() == pytest.approx(FIXED_S / PER_TOKEN_S, rel=1e-6)


def test_no_fit_before_enough_steps_or_while_they_are_all_one_size() -> None:
    assert fitted([1, 512]).fixed_in_tokens() is None  # 2 steps
    assert fitted([1] * 100).fixed_in_tokens() is None  # decode steps only: no slope
    falling = StepCostFit()
    for n in range(1, 40):
        falling.record(n, 1.0 / n)  # bigger steps faster: no cost model to trust
    assert falling.fixed_in_tokens() is None


def mean_ttft(group: int, prompts: int, prompt_s: float, step_s: float) -> float:
    """Equal prompts finished `group` a step, each step `step_s` plus its prompts."""
    steps = math.ceil(prompts / group)
    finished = [min(group, prompts - k * group) for k in range(steps)]
    clock, total = 0.0, 0.0
    for count in finished:
        clock += step_s + count * prompt_s
        total += clock * count
    return total / prompts


@pytest.mark.parametrize(
    ("prompts", "length", "fixed_tokens", "decoding"),
    [(16, 37, 4.8, 0), (16, 37, 4.8, 15), (8, 300, 4.8, 8), (32, 20, 60.0, 4), (5, 12, 1.0, 0)],
)
def test_the_group_is_within_a_few_percent_of_the_best_mean_time_to_first_token(
    prompts: int, length: int, fixed_tokens: float, decoding: int
) -> None:
    prompt_s, step_s = length, fixed_tokens + decoding  # in tokens' time
    best = min(mean_ttft(g, prompts, prompt_s, step_s) for g in range(1, prompts + 1))
    chosen = prompts_to_finish([length] * prompts, decoding, fixed_tokens)
    assert mean_ttft(chosen, prompts, prompt_s, step_s) <= 1.05 * best
    assert mean_ttft(chosen, prompts, prompt_s, step_s) < mean_ttft(
        prompts, prompts, prompt_s, step_s
    )


def test_a_dear_step_takes_every_prompt_and_one_prompt_is_one_group() -> None:
    """Weights streamed over PCIe for each step cost thousands of tokens' time: one step."""
    assert prompts_to_finish([37] * 16, 0, fixed_in_tokens=50_000.0) == 16
    assert prompts_to_finish([37], 15, fixed_in_tokens=4.8) == 1
    assert prompts_to_finish([], 3, fixed_in_tokens=4.8) == 0


QUESTIONS = (
    "Name three colours of the sea.",
    "What do bakers need to make bread?",
    "Tell me about trains in one sentence.",
    "Why do cats purr?",
    "How do bees make honey?",
    "What is the tallest mountain in Europe?",
)
REPLY = GREEDY.with_changes(max_tokens=8)


@pytest.fixture(scope="module")
def model(default_model_file: Path) -> Iterator[LoadedModel]:
    params = LoadParams(str(default_model_file), n_ctx=512, n_threads=1, n_parallel=6)
    loaded = load_model(params)
    yield loaded
    loaded.close()


def request(model: LoadedModel, question: str) -> StreamRequest:
    tokens = model.tokenize_prompt(model.chat_template.render([ChatMessage("user", question)]))
    return replace(StreamRequest.of_tokens(tokens, REPLY, reuse_cache=False), top_logprobs=TOP)


def first_token_steps(
    model: LoadedModel, streams_of: list[StreamRequest]
) -> tuple[list[Stream], list[int]]:
    """The streams, each admitted to a sequence of its own at once, run to the end; and the
    step at which each one's first token came."""
    scheduler = model.scheduler
    steps: list[DecodeStep] = []
    scheduler.observers.append(steps.append)
    try:
        streams = [scheduler.admit(r, i + 1, seed=0) for i, r in enumerate(streams_of)]
        first: dict[int, int] = {}
        while not all(s.done for s in streams):
            scheduler.step()
            for i, stream in enumerate(streams):
                if stream.generated and i not in first:
                    first[i] = len(steps)
    finally:
        scheduler.observers.remove(steps.append)
    return streams, [first[i] for i in range(len(streams))]


def test_a_burst_of_prompts_gets_its_first_tokens_a_group_at_a_time_and_the_same_tokens(
    model: LoadedModel,
) -> None:
    requests = [request(model, q) for q in QUESTIONS]
    alone = []
    for r in requests:  # one at a time: these steps also teach the fit what a step costs
        stream = model.scheduler.admit(r, 1, seed=0)
        run_until_done(model.scheduler, [stream])
        alone.append(stream.take_logprobs())
    assert model.scheduler.composer.step_costs.fixed_in_tokens() is not None
    streams, first_steps = first_token_steps(model, requests)
    for stream, solo in zip(streams, alone, strict=True):
        assert_agrees_with_solo(stream.take_logprobs(), solo)
    assert len(set(first_steps)) > 1  # not every first token at the end of one long step
    assert min(first_steps) < max(first_steps)
