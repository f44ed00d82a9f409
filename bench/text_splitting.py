"""How long the summary splitter takes as a document doubles, on one line and on many.

A summary job splits a document longer than a sequence's context into pieces
by tokens. This splits seeded text with the embedded default model's tokenizer
and a job's budget (1,700 tokens: 2,048 per sequence less the answer, the
prompt and a margin), as the job does, in three shapes of the same size:
prose on one line, the same prose in 100-character lines, and minified JSON
(one line, no spaces). For each size it prints the processor seconds (best of --rounds)
and the ratio to the size before: a linear splitter doubles with the text.
The splitter as it was before issue 44 (kept below, quadratic on a long line)
is timed once beside it, up to --old-max characters.

    .venv/bin/python bench/text_splitting.py [--sizes 100000 200000 400000 5000000]
        [--old-max 400000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from app.summaries.text_chunks import CountTokens, split_by_tokens
from engine.llama.load_params import LoadParams
from engine.model.default_model import default_model_path
from engine.runtime.loaded_model import load_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the seeded text the tests split
from tests.seeded_text import minified_json, sentences  # noqa: E402

BUDGET = 1700


def in_lines(text: str) -> str:
    return "\n".join(textwrap.wrap(text, 100))


SHAPES: dict[str, Callable[[int], str]] = {
    "one line": sentences,
    "100-char lines": lambda size: in_lines(sentences(size))[:size],
    "minified JSON": minified_json,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[100_000, 200_000, 400_000, 5_000_000]
    )
    parser.add_argument("--old-max", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = load_model(LoadParams(str(default_model_path()), n_ctx=2048, n_threads=2))

    def count(text: str) -> int:
        return len(model.tokenize_text(text))

    print(f"{'shape':16} {'chars':>9} {'pieces':>6} {'new s':>8} {'x prev':>6}", end="")
    print(f" {'old s':>8} {'x prev':>6} {'old/new':>7}")
    for shape, make in SHAPES.items():
        previous: dict[str, float] = {}
        for size in args.sizes:
            text = make(size)
            new_s, pieces = _best(split_by_tokens, text, count, args.rounds)
            row = f"{shape:16} {len(text):>9,} {pieces:>6} {new_s:>8.3f} "
            row += _ratio(new_s, previous.get("new"))
            previous["new"] = new_s
            if size <= args.old_max:
                old_s, _ = _best(old_split_by_tokens, text, count, 1)  # seconds, not ms
                row += f" {old_s:>8.3f} {_ratio(old_s, previous.get('old'))} {old_s / new_s:>6.1f}x"
                previous["old"] = old_s
            print(row, flush=True)
    model.close()
    return 0


def _best(
    split: Callable[[str, int, CountTokens], list[str]], text: str, count: CountTokens, rounds: int
) -> tuple[float, int]:
    times = []
    for _ in range(rounds):
        began = time.process_time()  # the tokenizer runs in this thread: less noise than wall
        pieces = split(text, BUDGET, count)
        times.append(time.process_time() - began)
    return min(times), len(pieces)


def _ratio(seconds: float, before: float | None) -> str:
    return f"{seconds / before:>5.2f}x" if before else f"{'':>6}"


# --- the splitter before issue 44, as it was, for comparison ----------------------------

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def old_split_by_tokens(text: str, max_tokens: int, count_tokens: CountTokens) -> list[str]:
    if count_tokens(text) <= max_tokens:
        return [text]
    units: list[str] = []
    for paragraph in _PARAGRAPH_BREAK.split(text):
        if count_tokens(paragraph) <= max_tokens:
            units.append(paragraph)
            continue
        for line in paragraph.splitlines():
            units.extend(_old_cut_line(line, max_tokens, count_tokens))
    pieces: list[str] = []
    current = ""
    for unit in (unit for unit in units if unit.strip()):
        candidate = f"{current}\n\n{unit}" if current else unit
        if current and count_tokens(candidate) > max_tokens:
            pieces.append(current)
            candidate = unit
        current = candidate
    return [*pieces, current] if current else pieces


def _old_cut_line(line: str, max_tokens: int, count_tokens: CountTokens) -> list[str]:
    pieces: list[str] = []
    rest = line
    while rest and count_tokens(rest) > max_tokens:  # the whole rest, counted once a piece
        low, high = 1, len(rest)
        while low < high:  # bisection over the whole rest of the line
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


if __name__ == "__main__":
    raise SystemExit(main())
