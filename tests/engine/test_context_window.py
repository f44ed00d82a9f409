"""fit_messages keeps the newest turns that fit, the system prompt always, and never overflows."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import ContextOverflowError
from engine.model.chat_message import ChatMessage
from engine.runtime.context_window import MIN_REPLY_TOKENS, fit_messages


def count_words(messages) -> tuple[int, int]:
    """A stand-in tokenizer: one token per word plus 4 per message of template overhead
    (the count is its prompt, too)."""
    n_tokens = sum(len(m.content.split()) + 4 for m in messages)
    return n_tokens, n_tokens


def conversation(lengths: list[int], system: bool) -> list[ChatMessage]:
    messages = [ChatMessage("system", "be brief")] if system else []
    for i, n_words in enumerate(lengths):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append(ChatMessage(role, " ".join(["w"] * n_words)))
    if messages[-1].role != "user":
        messages.append(ChatMessage("user", "and now?"))
    return messages


@given(
    lengths=st.lists(st.integers(0, 60), min_size=1, max_size=30),
    system=st.booleans(),
    n_ctx=st.integers(64, 400),
    reply=st.integers(1, 300),
)
def test_fitted_prompt_fits_and_keeps_what_matters(
    lengths: list[int], system: bool, n_ctx: int, reply: int
) -> None:
    messages = conversation(lengths, system)
    try:
        fitted = fit_messages(messages, count_words, n_ctx, reply)
    except ContextOverflowError:
        alone = [m for m in messages[:1] if m.role == "system"] + [messages[-1]]
        assert count_words(alone)[0] > n_ctx - MIN_REPLY_TOKENS
        return
    assert fitted.n_tokens == count_words(fitted.messages)[0]
    assert fitted.n_tokens <= n_ctx - min(reply, MIN_REPLY_TOKENS)
    assert fitted.messages[-1] == messages[-1]
    if system:
        assert fitted.messages[0] == messages[0]
    kept_turns = [m for m in fitted.messages if m.role != "system"]
    all_turns = [m for m in messages if m.role != "system"]
    assert kept_turns == all_turns[len(all_turns) - len(kept_turns) :]
    assert kept_turns[0].role == "user"
    assert fitted.dropped_messages == len(all_turns) - len(kept_turns)
    if fitted.dropped_messages:  # the fewest left out: one exchange more would not fit
        earlier = [i for i in range(fitted.dropped_messages) if all_turns[i].role == "user"]
        start = max(earlier, default=0)
        kept_more = messages[: int(system)] + all_turns[start:]
        assert count_words(kept_more)[0] > n_ctx - min(reply, max(n_ctx // 2, MIN_REPLY_TOKENS))


def test_nothing_is_dropped_when_everything_fits() -> None:
    messages = conversation([3, 3, 3], system=True)
    fitted = fit_messages(messages, count_words, 1000, 100)
    assert fitted.messages == tuple(messages) and fitted.dropped_messages == 0


def test_oldest_exchange_goes_first() -> None:
    messages = conversation([50, 50, 5], system=True)
    fitted = fit_messages(messages, count_words, 80, 16)
    assert [m.content for m in fitted.messages] == ["be brief", " ".join(["w"] * 5)]
    assert fitted.dropped_messages == 2
    assert fitted.prompt == count_words(fitted.messages)[1]  # the prompt of what was kept


def test_a_single_message_too_long_for_the_window_is_refused() -> None:
    with pytest.raises(ContextOverflowError, match="too long for the context window"):
        fit_messages([ChatMessage("user", "w " * 500)], count_words, 256, 64)


def test_a_long_history_is_measured_a_logarithmic_number_of_times() -> None:
    """A long chat's turn renders and tokenizes its prompt about log2(n) times, not once
    per exchange left out (2,000 messages took 17 s before the first token)."""
    messages = conversation([40] * 2000, system=True)
    measured: list[int] = []

    def counting(candidate):
        measured.append(len(candidate))
        return count_words(candidate)

    fitted = fit_messages(messages, counting, 2048, 128)
    assert fitted.n_tokens <= 2048 - 128 and len(measured) <= 2 + 12
    assert count_words(messages[:1] + messages[-len(fitted.messages) - 1 :])[0] > 2048 - 128
