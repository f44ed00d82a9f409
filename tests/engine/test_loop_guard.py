"""The loop guard: a reply that repeats itself ends, keeping the text before the repeats."""

from __future__ import annotations

from engine.generation.loop_guard import MIN_LOOP_TOKENS, LoopGuard
from engine.generation.sampling import GREEDY
from engine.generation.stats import FinishReason
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import LoadedModel


def first_alarm(guard: LoopGuard, tokens: list[int]) -> tuple[int, int] | None:
    """(tokens fed when the guard spoke, tokens it keeps), or None if it never did."""
    for fed, token in enumerate(tokens, start=1):
        keep = guard.add_token(token)
        if keep is not None:
            return fed, keep
    return None


def test_a_sentence_said_three_times_in_a_row_is_a_loop_and_one_copy_is_kept() -> None:
    opening = [900, 901, 902]
    sentence = list(range(100, 112))  # a 12-token sentence
    alarm = first_alarm(LoopGuard(), opening + sentence * 5)
    assert alarm == (len(opening) + 3 * len(sentence), len(opening) + len(sentence))


def test_twice_is_not_a_loop() -> None:
    sentence = list(range(100, 112))
    assert first_alarm(LoopGuard(), sentence * 2 + [5, 6, 7]) is None


def test_a_short_stretch_must_fill_the_minimum_to_count() -> None:
    dashes = [7] * (MIN_LOOP_TOKENS - 1)
    assert first_alarm(LoopGuard(), [1, 2] + dashes) is None
    assert first_alarm(LoopGuard(), [1, 2] + dashes + [7]) == (2 + MIN_LOOP_TOKENS, 3)


def test_a_list_whose_items_differ_is_not_a_loop() -> None:
    items = [t for n in range(40) for t in (50, 1000 + n, 51, 52)]  # "- item n\n" forty times
    assert first_alarm(LoopGuard(), items) is None


def test_the_same_sentence_a_third_time_anywhere_ends_before_it() -> None:
    guard = LoopGuard()
    text = "The sea is blue today. Boats sail out. The sea is blue today. Fish swim. "
    assert guard.add_text(text) is None
    third = "The sea is blue today. And more."
    keep = guard.add_text(third)
    assert keep is not None and (text + third)[:keep] == text


def test_short_sentences_may_recur() -> None:
    guard = LoopGuard()
    assert guard.add_text("Yes. No. Yes. No. Yes. No. Yes.\n") is None


def test_a_looping_greedy_reply_ends_for_repetition_without_its_repeats(
    default_model: LoadedModel,
) -> None:
    """Greedy with no penalty, the default model repeats a line of its poem; the guard ends
    the reply there, and the conversation remembers it without the repeats."""
    settings = GREEDY.with_changes(max_tokens=120)
    session = ChatSession(default_model)
    reply = session.reply("Write a poem about the sea.", settings)
    assert reply.finish_reason is FinishReason.REPETITION
    assert reply.stats.generated_tokens < 120
    lines = [line.strip() for line in reply.text.splitlines() if line.strip()]
    assert max(lines.count(line) for line in lines) < 3
    assert session.messages[-1].content == reply.text
    unguarded = ChatSession(default_model).reply(
        "Write a poem about the sea.", settings.with_changes(stop_loops=False)
    )
    assert unguarded.finish_reason is FinishReason.LENGTH
    assert unguarded.text.startswith(reply.text)
