"""Seeded text of the shapes a summary job meets whole on one line: prose and minified JSON.

Shared by tests/app/test_text_chunks.py and bench/text_splitting.py, so the bench times
the very text the tests split.
"""

from __future__ import annotations

import random

WORDS = ("the", "a", "of", "to", "and", "in", "is", "for", "report", "model", "data", "error")


def sentences(size: int, seed: int = 1) -> str:
    """Sentences of 5-20 seeded words on one line, `size` characters."""
    rng = random.Random(seed)
    text: list[str] = []
    length = 0
    while length < size:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20)))
        text.append(sentence.capitalize() + ". ")
        length += len(text[-1])
    return "".join(text)[:size]


def minified_json(size: int, seed: int = 1) -> str:
    """Records as an export writes them: one line, no spaces, `size` characters."""
    rng = random.Random(seed)
    records: list[str] = []
    length = 0
    while length < size:
        tags = ",".join(f'"{rng.choice(WORDS)}"' for _ in range(rng.randint(0, 4)))
        records.append(f'{{"id":{len(records)},"user":"{rng.choice(WORDS)}","tags":[{tags}]}}')
        length += len(records[-1]) + 1
    return ("[" + ",".join(records) + "]")[:size]
