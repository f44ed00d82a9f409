"""Splitting documents by tokens: every piece fits, nothing is lost, paragraphs stay whole."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.summaries.text_chunks import split_by_tokens


def words(text: str) -> int:
    """A stand-in tokenizer: one token per word (the real one is tested in the job tests)."""
    return len(text.split())


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
