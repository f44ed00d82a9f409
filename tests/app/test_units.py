"""Speeds and durations as every screen and the CLI say them: one way each
(app.screen_text.units)."""

from __future__ import annotations

import pytest

from app.screen_text.units import format_duration, speed_text


@pytest.mark.parametrize(
    ("tokens_per_s", "short", "spelled"),
    [
        (4.25, "4.2 tok/s", "4.2 tokens/s"),
        (85.4, "85.4 tok/s", "85.4 tokens/s"),
        (250.4, "250 tok/s", "250 tokens/s"),  # three figures are enough
        (11835.2, "11,835 tok/s", "11,835 tokens/s"),
    ],
)
def test_a_speed_reads_the_same_in_tables_and_in_sentences(
    tokens_per_s: float, short: str, spelled: str
) -> None:
    assert speed_text(tokens_per_s) == short
    assert speed_text(tokens_per_s, "tokens/s") == spelled


def test_a_duration_under_a_second_is_never_said_as_none() -> None:
    assert [format_duration(s) for s in (0.0, 0.4, 59.4, 3600)] == [
        "1 s", "1 s", "59 s", "1 h 00 min",
    ]  # fmt: skip
