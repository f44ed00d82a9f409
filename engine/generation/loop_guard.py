"""Noticing a reply that repeats itself, so it can be ended instead of running to its limit.

Penalties and DRY make repetition unlikely; they do not forbid it, and a small
model decoding greedily falls into loops: one sentence again and again until
the token limit. The guard watches a stream's tokens and text and says when
the reply has become a loop, and how much of it to keep (the text before the
repeats began). Two shapes are caught:

- the reply's last tokens are one stretch said over and over back to back
  (three times for a sentence-sized stretch; a short stretch, even a single
  token, must fill at least `MIN_LOOP_TOKENS` to count, so a row of dashes or
  a few blank lines do not);
- the same sentence of several words completed a third time anywhere in the
  reply (A B A C A).
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

MIN_REPEATS = 3
MIN_LOOP_TOKENS = 32
MAX_PERIOD = 256  # tokens: longer stretches are paragraphs, which the sentence check sees
MIN_SENTENCE_WORDS = 4

_SENTENCE_END = re.compile(r"[.!?]+(?=\s)|\n")
_SPACES = re.compile(r"\s+")


class LoopGuard:
    """Fed a reply's tokens and text as they come; says when it loops."""

    def __init__(self) -> None:
        self._tokens = np.zeros(0, dtype=np.int64)
        self._n = 0
        # runs[p-1]: how many of the last positions i have t[i] == t[i-p]
        self._runs = np.zeros(MAX_PERIOD, dtype=np.int64)
        self._needed = np.maximum(
            np.arange(1, MAX_PERIOD + 1) * (MIN_REPEATS - 1),
            MIN_LOOP_TOKENS - np.arange(1, MAX_PERIOD + 1),
        )
        self._text = ""
        self._sentence_start = 0
        self._seen: Counter[str] = Counter()

    def add_token(self, token: int) -> int | None:
        """Take the next token; when the tail is a loop, how many tokens to keep (one copy)."""
        if self._n == len(self._tokens):
            self._tokens = np.resize(self._tokens, max(64, 2 * self._n))
        self._tokens[self._n] = token
        self._n += 1
        periods = min(MAX_PERIOD, self._n - 1)
        if periods == 0:
            return None
        earlier = self._tokens[self._n - 1 - periods : self._n - 1][::-1]  # t[n-1-p], p = 1..
        same = earlier == token
        self._runs[:periods] = np.where(same, self._runs[:periods] + 1, 0)
        looping = np.flatnonzero(self._runs[:periods] >= self._needed[:periods])
        if len(looping) == 0:
            return None
        return self._n - int(self._runs[looping[0]])

    def add_text(self, text: str) -> int | None:
        """Take the reply's next text; when a sentence has now come a third time, how many
        characters of the reply to keep (those before that sentence began)."""
        self._text += text
        for end in _SENTENCE_END.finditer(self._text, self._sentence_start):
            start, self._sentence_start = self._sentence_start, end.end()
            sentence = _SPACES.sub(" ", self._text[start : end.end()]).strip().lower()
            if len(sentence.split()) < MIN_SENTENCE_WORDS:
                continue
            self._seen[sentence] += 1
            if self._seen[sentence] >= MIN_REPEATS:
                return start + (len(self._text[start:]) - len(self._text[start:].lstrip()))
        return None
