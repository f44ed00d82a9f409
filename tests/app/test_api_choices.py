"""Several choices for one request (`n`), as llama-server serves them: sequences of the one
context decoded side by side, the prompt evaluated once. The official `openai` client, a real
server on a loopback port, the real default model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from api_server_fixtures import LogWatch, Serving, start_serving

SLOTS = 3
BOOK = [
    {"role": "system", "content": "Book"},
    {"role": "user", "content": "What is the best book"},
]


@pytest.fixture(scope="module")
def serving(default_model_file: Path) -> Iterator[Serving]:
    started = start_serving(str(default_model_file), n_slots=SLOTS, n_ctx_per_slot=1024)
    yield started
    started.close()


def test_chat_completions_multiple_choices(serving: Serving) -> None:
    """llama.cpp's tools/server/tests/unit/test_chat_completion.py, ported: twice, so the
    second request meets the first one's cache."""
    client = serving.client()
    for _ in range(2):
        res = client.chat.completions.create(
            model=serving.model_id,
            messages=BOOK,
            max_tokens=8,
            n=2,
        )
        assert len(res.choices) == 2
        assert [choice.index for choice in res.choices] == [0, 1]
        for choice in res.choices:
            assert choice.message.role == "assistant"
            assert choice.finish_reason == "length"
            assert choice.message.content


def test_greedy_choices_each_equal_the_single_reply(serving: Serving) -> None:
    client = serving.client()
    asked = {"model": serving.model_id, "messages": BOOK, "max_tokens": 16, "temperature": 0}
    single = client.chat.completions.create(**asked)
    both = client.chat.completions.create(**asked, n=2)
    expected = single.choices[0].message.content
    assert expected
    assert [c.message.content for c in both.choices] == [expected, expected]
    assert [c.finish_reason for c in both.choices] == [single.choices[0].finish_reason] * 2
    # OpenAI's count: the prompt once, the completion tokens of every choice
    assert both.usage.prompt_tokens == single.usage.prompt_tokens
    assert both.usage.completion_tokens == 2 * single.usage.completion_tokens
    assert both.usage.total_tokens == both.usage.prompt_tokens + both.usage.completion_tokens


def test_sampled_choices_with_a_seed_differ(serving: Serving) -> None:
    """Each choice draws with a seed of its own (seed, seed + 1, ...): n copies of one reply
    would be no choice at all."""
    client = serving.client()
    reply = client.chat.completions.create(
        model=serving.model_id, n=3, seed=11, temperature=1.0, max_tokens=24,
        messages=[{"role": "user", "content": "Write a short poem about a cat."}],
    )  # fmt: skip
    texts = [choice.message.content for choice in reply.choices]
    assert [choice.index for choice in reply.choices] == [0, 1, 2]
    assert all(texts) and len(set(texts)) == 3, texts


def test_streamed_choices_gather_to_the_whole_ones(serving: Serving) -> None:
    client = serving.client()
    asked = {"model": serving.model_id, "messages": BOOK, "max_tokens": 16, "temperature": 0,
             "n": 2}  # fmt: skip
    whole = client.chat.completions.create(**asked)
    chunks = list(
        client.chat.completions.create(**asked, stream=True, stream_options={"include_usage": True})
    )
    texts: dict[int, str] = {}
    finishes: dict[int, list[str]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                finishes.setdefault(choice.index, []).append(choice.finish_reason)
    assert texts == {c.index: c.message.content for c in whole.choices}
    assert finishes == {c.index: [c.finish_reason] for c in whole.choices}
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_the_prompt_is_evaluated_once_and_copied(serving: Serving) -> None:
    """The second choice starts from a copy of the first one's cache (as llama-server's
    child slots do), not from the prompt evaluated again."""
    client = serving.client()
    long_system = "You answer questions about books briefly and politely. " * 6
    messages = [{"role": "system", "content": long_system}, BOOK[1]]
    with LogWatch("choice 1: sequence") as watch:
        reply = client.chat.completions.create(
            model=serving.model_id,
            messages=messages,
            max_tokens=4,
            n=2,
        )
    assert len(reply.choices) == 2
    started = [m for m in watch.messages if "choice 1: sequence" in m]
    assert started and "copied from sequence" in started[0], watch.messages[-8:]


def test_completions_take_n_too(serving: Serving) -> None:
    reply = serving.client().completions.create(
        model=serving.model_id, prompt="The capital of France is", n=2, max_tokens=4,
        temperature=0,
    )  # fmt: skip
    assert [c.index for c in reply.choices] == [0, 1]
    assert reply.choices[0].text and reply.choices[0].text == reply.choices[1].text


@pytest.mark.parametrize("n", [0, SLOTS + 1])
def test_n_past_the_slots_or_below_one_is_refused_by_name(serving: Serving, n: int) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        serving.client().chat.completions.create(
            model=serving.model_id, messages=BOOK, max_tokens=4, n=n
        )
    assert refused.value.param == "n"
    words = f"at most {SLOTS} choices" if n > SLOTS else "n must be a positive integer"
    assert words in refused.value.message
