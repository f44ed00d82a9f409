"""Splitting a long document into pieces that fit a sequence's context, by tokens.

A piece is about the longest stretch of text ahead that fits, cut back to the
best boundary in its second half: a paragraph break, else a line break, else
the end of a sentence, else a space, else a comma or a closing bracket
(minified JSON, code), else anywhere. A paragraph that fits in a piece of its
own is never cut, even when that leaves the piece before it short: a summary of
half a paragraph reads badly. Nothing is dropped or repeated: the pieces joined
give the whole text back (a separator ends the piece before it), save a run of
blank space longer than a piece, which has nothing to summarise.

The time is linear in the text's length, on one line or many: every count is of
a stretch about one piece long, never of the rest of the document (counting
the rest once per piece, and bisecting over the whole line, made a 5 MB line
take most of an hour). Where a piece may end is found by counting a few
prefixes of the text ahead: the first guessed from the characters per token
seen so far, the next interpolated from the last count, until one fits to
within 1/32 of the budget (or, under a small budget, the longest prefix that
fits is bracketed to within 1/32 of its length); bisection takes over if
interpolation is slow to get there.
"""

from __future__ import annotations

import re
from collections.abc import Callable

CountTokens = Callable[[str], int]

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")  # the same pattern backwards
# The finer boundaries, best first, written backwards: they are searched in the
# piece reversed, where the first match is the last boundary in the piece. A
# sentence's space is tried from its first character only, so a long run of
# spaces is walked once, not once for each of its characters.
_FINER_BOUNDARIES_BACKWARDS = (
    re.compile(r"\n"),  # a line
    re.compile(r"(?<!\s)\s+[\"'\u201d\u2019)\]]*[.!?\u2026]|[\u3002\uff01\uff1f]"),  # a sentence
    re.compile(r"\s+"),  # a word
    re.compile(r"[,;)\]}]"),  # a clause, an item
)
_FIRST_CHARS_PER_TOKEN = 4.0
_PRECISION = 32
_INTERPOLATIONS = 3  # guesses by interpolation before bisection takes over


def split_by_tokens(text: str, max_tokens: int, count_tokens: CountTokens) -> list[str]:
    """Pieces of at most `max_tokens` tokens each (as `count_tokens` counts them), in order.

    A piece holds at least one character, so a character that alone is worth
    more tokens than the budget (possible only with a tiny one) is a piece.
    """
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    pieces: list[str] = []
    start = fits_to = 0
    chars_per_token = _FIRST_CHARS_PER_TOKEN
    while start < len(text) or not pieces:
        end, chars_per_token = _longest_fit(
            text, start, fits_to, max_tokens, count_tokens, chars_per_token
        )
        cut, fits_to = (
            _best_cut(text, start, end, max_tokens, count_tokens) if end < len(text) else (end, end)
        )
        pieces.append(text[start:cut])
        start = cut
    if len(pieces) == 1:
        return pieces
    return [piece for piece in pieces if not piece.isspace()]


def _longest_fit(
    text: str,
    start: int,
    fits_to: int,
    budget: int,
    count_tokens: CountTokens,
    chars_per_token: float,
) -> tuple[int, float]:
    """Where a piece from `start` may end, and the characters per token last counted.

    The whole rest if it fits; else the end of a prefix that fits and is
    within 1/32 of the budget or of the longest prefix that fits; at least one
    character. `fits_to` is an end already known to fit.
    """
    n = len(text)
    enough = budget - budget // _PRECISION if budget >= _PRECISION else budget + 1
    target = budget - budget / (2 * _PRECISION)
    low, high = max(start, fits_to), n + 1  # text[start:low] fits; text[start:high] does not
    if low == n:
        return n, chars_per_token
    guess = start + max(1, round(target * chars_per_token))
    probes = 0
    while True:
        guess = min(max(guess, low + 1), high - 1, n)
        tokens = count_tokens(text[start:guess])
        probes += 1
        if tokens:
            chars_per_token = (guess - start) / tokens
        if tokens <= budget:
            low = guess
            if low == n or tokens >= enough:
                return low, chars_per_token
        else:
            high = guess
        if high <= n and high - low <= max(1, (high - start) // _PRECISION):
            return max(low, start + 1), chars_per_token
        if probes <= _INTERPOLATIONS and tokens:
            guess = start + round(chars_per_token * target)
        elif high > n:
            guess = start + 2 * max(low - start, 1)
        else:
            guess = (low + high) // 2


def _best_cut(
    text: str, start: int, end: int, budget: int, count_tokens: CountTokens
) -> tuple[int, int]:
    """Where the piece `text[start:end]`, which fits, is best cut; and how far the next is
    known to fit from there."""
    piece = text[start:end]
    backwards = piece[::-1]
    words = len(piece.lstrip())  # a cut leaves more than blank space before it
    half = min((end - start) // 2, words)  # a boundary within `half` is in the second half
    paragraph = _PARAGRAPH_BREAK.search(backwards, 0, words)
    if paragraph is not None and paragraph.start() >= half:
        at = end - paragraph.start()
        following = _paragraph_fitting_whole(text, at, end - start, budget, count_tokens)
        if following is not None and _fits(text, start, at, budget, count_tokens):
            return at, following
    cut = end
    for boundary in (_PARAGRAPH_BREAK, *_FINER_BOUNDARIES_BACKWARDS):
        found = boundary.search(backwards, 0, half)
        if found is not None:
            cut = end - found.start()
            break
    if cut != end and not _fits(text, start, cut, budget, count_tokens):
        cut = end  # counted already
    return cut, cut


def _paragraph_fitting_whole(
    text: str, at: int, reach: int, budget: int, count_tokens: CountTokens
) -> int | None:
    """The end of the paragraph at `at` (its break included) if it fits a piece of its own.

    One longer than twice `reach` characters is taken not to fit, uncounted, so
    that no count is of much more than a piece.
    """
    limit = at + 2 * reach
    following = _PARAGRAPH_BREAK.search(text, at, limit)
    stop = following.end() if following else len(text) if len(text) <= limit else None
    if stop is None or count_tokens(text[at:stop]) > budget:
        return None
    return stop


def _fits(text: str, start: int, cut: int, budget: int, count_tokens: CountTokens) -> bool:
    """Whether the piece up to a boundary fits, counted: tokens need not grow with the text
    (a word's last letters can merge with the rest into fewer tokens)."""
    return count_tokens(text[start:cut]) <= budget
