"""Splitting documents by tokens: every piece fits, nothing is lost, paragraphs stay whole,
and a document on one line costs what the same text in many lines costs (linear time)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.summaries.text_chunks import CountTokens, split_by_tokens
from engine.runtime.loaded_model import LoadedModel
from tests.seeded_text import minified_json, sentences

BUDGET = 1700  # a summary job's, at its default 2,048 tokens a sequence


def words(text: str) -> int:
    """A stand-in tokenizer: one token per word (the real one is tested in the job tests)."""
    return len(text.split())


@pytest.fixture(scope="module")
def tokens(default_model: LoadedModel) -> CountTokens:
    """The real tokenizer, counted as a summary job counts a document's text."""
    return lambda text: len(default_model.tokenize_text(text))


def test_a_short_text_is_one_piece() -> None:
    assert split_by_tokens("one two three", 10, words) == ["one two three"]


def test_paragraphs_are_kept_whole_when_they_fit() -> None:
    text = "\n\n".join(f"paragraph {i} " + "word " * 8 for i in range(6))
    pieces = split_by_tokens(text, 25, words)
    assert all(words(p) <= 25 for p in pieces) and len(pieces) == 3
    assert all(p.count("paragraph") == 2 for p in pieces)


def test_a_single_huge_line_is_cut_at_spaces() -> None:
    line = " ".join(f"w{i}" for i in range(100))
    pieces = split_by_tokens(line, 30, words)
    assert all(words(p) <= 30 for p in pieces)
    assert " ".join(pieces).split() == line.split()


def test_a_budget_below_one_token_is_refused() -> None:
    with pytest.raises(ValueError):
        split_by_tokens("text", 0, words)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(alphabet="abc \n", min_size=0, max_size=80), min_size=1, max_size=12),
    st.integers(min_value=1, max_value=12),
)
def test_every_piece_fits_and_no_word_is_lost(paragraphs: list[str], budget: int) -> None:
    text = "\n\n".join(paragraphs)
    pieces = split_by_tokens(text, budget, words)
    assert all(words(piece) <= budget for piece in pieces)
    assert " ".join(pieces).split() == text.split()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(alphabet="ab .,\n", min_size=0, max_size=300), min_size=1, max_size=8),
    st.integers(min_value=1, max_value=40),
)
def test_the_pieces_joined_are_the_text(paragraphs: list[str], budget: int) -> None:
    text = "\n\n".join(paragraphs)
    pieces = split_by_tokens(text, budget, words)
    assert all(words(piece) <= budget for piece in pieces)
    assert "".join(pieces) == text


def test_a_paragraph_that_fits_is_not_cut_to_fill_the_piece_before() -> None:
    opening = "A short opening paragraph.\n\n"
    body = "\n".join(f"line {i} of the second paragraph, which fits alone" for i in range(4))
    body += " (38 words)"  # the opening and the body are 42, the body and the end 40
    pieces = split_by_tokens(opening + body + "\n\nThe end.", 40, words)
    assert pieces == [opening, body + "\n\nThe end."]


def test_a_long_line_is_cut_after_whole_sentences() -> None:
    line = sentences(20_000)
    pieces = split_by_tokens(line, 300, words)
    assert len(pieces) > 5 and all(words(piece) <= 300 for piece in pieces)
    assert all(piece.endswith(". ") for piece in pieces[:-1])
    assert "".join(pieces) == line


def test_minified_json_is_cut_between_items(tokens: CountTokens) -> None:
    text = minified_json(60_000)
    pieces = split_by_tokens(text, BUDGET, tokens)
    assert len(pieces) > 3 and all(tokens(piece) <= BUDGET for piece in pieces)
    assert all(piece[-1] in ",]}" for piece in pieces[:-1])
    assert "".join(pieces) == text


def test_a_five_megabyte_line_is_split_whole_counting_each_character_a_few_times(
    tokens: CountTokens,
) -> None:
    """Minified JSON, the worst line: no space to cut at. The old splitter counted the
    whole rest of the line once a piece (~44 minutes for this one); here the characters
    counted are a small multiple of the text, whatever its length."""
    line = minified_json(5_000_000)
    counts: dict[str, int] = {}  # what the tokenizer said of each text counted
    counted = 0

    def counting(text: str) -> int:
        nonlocal counted
        counted += len(text)
        if counted > 8 * len(line):
            raise AssertionError(f"counted over 8 times the {len(line):,} characters")
        counts[text] = tokens(text)
        return counts[text]

    pieces = split_by_tokens(line, BUDGET, counting)
    assert "".join(pieces) == line
    assert all((counts[p] if p in counts else tokens(p)) <= BUDGET for p in pieces)


@pytest.mark.parametrize("make", [sentences, minified_json], ids=["prose", "json"])
def test_twice_the_line_takes_about_twice_the_time(
    make: Callable[[int], str], tokens: CountTokens
) -> None:
    """Measured side by side, best of five, in this process's processor time, which other
    work on a shared machine disturbs less than the clock. Linear is 2x (1.8-2.3x measured
    here under load); the old splitter took 3.6-3.7x, so the bound leaves noise room
    between the two. The counting test above is the exact check of linearity."""
    small, large = make(100_000), make(200_000)
    best = {small: float("inf"), large: float("inf")}
    for _ in range(5):
        for text in (small, large):
            began = time.process_time()
            split_by_tokens(text, BUDGET, tokens)
            best[text] = min(best[text], time.process_time() - began)
    assert best[large] / best[small] < 2.8
