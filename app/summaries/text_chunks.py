"""Splitting a long document into pieces that fit a sequence's context, by tokens.

Pieces follow paragraph boundaries where they can (a summary of half a
paragraph reads badly), fall back to lines, and only cut inside a line when a
single line is longer than a piece may be. Nothing is dropped: the pieces
joined back give the whole text, so a long document is never silently
truncated.
"""

from __future__ import annotations

import re
from collections.abc import Callable

CountTokens = Callable[[str], int]
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def split_by_tokens(text: str, max_tokens: int, count_tokens: CountTokens) -> list[str]:
    """Pieces of at most `max_tokens` tokens each (as `count_tokens` counts them)."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    if count_tokens(text) <= max_tokens:
        return [text]
    units = _units(text, max_tokens, count_tokens)
    return _pack(units, max_tokens, count_tokens)


def _units(text: str, max_tokens: int, count_tokens: CountTokens) -> list[str]:
    """Paragraphs, else lines, else character runs: each unit fits in one piece."""
    units: list[str] = []
    for paragraph in _PARAGRAPH_BREAK.split(text):
        if count_tokens(paragraph) <= max_tokens:
            units.append(paragraph)
            continue
        for line in paragraph.splitlines():
            units.extend(_cut_line(line, max_tokens, count_tokens))
    return [unit for unit in units if unit.strip()]


def _cut_line(line: str, max_tokens: int, count_tokens: CountTokens) -> list[str]:
    """A line longer than a piece: cut at spaces near the token budget (bisection on length)."""
    pieces: list[str] = []
    rest = line
    while rest and count_tokens(rest) > max_tokens:
        low, high = 1, len(rest)
        while low < high:  # the longest prefix that fits
            middle = (low + high + 1) // 2
            if count_tokens(rest[:middle]) <= max_tokens:
                low = middle
            else:
                high = middle - 1
        cut = rest.rfind(" ", 0, low)
        cut = low if cut <= low // 2 else cut
        pieces.append(rest[:cut])
        rest = rest[cut:].lstrip(" ")
    if rest:
        pieces.append(rest)
    return pieces


def _pack(units: list[str], max_tokens: int, count_tokens: CountTokens) -> list[str]:
    pieces: list[str] = []
    current = ""
    for unit in units:
        candidate = f"{current}\n\n{unit}" if current else unit
        if current and count_tokens(candidate) > max_tokens:
            pieces.append(current)
            candidate = unit
        current = candidate
    if current:
        pieces.append(current)
    return pieces
