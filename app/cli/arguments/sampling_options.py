"""The sampling flags, the same for `chat`, `ask-image` and `summarize`.

Each flag left out keeps the command's own default (a chat samples at 0.7, a
question about an image at 0.2, a summary greedily with penalties), so one
helper serves them all; a value llama.cpp would refuse is a one-line error.
"""

from __future__ import annotations

import argparse

from engine.errors import BadInputError
from engine.generation.sampling import SamplingSettings

# flag, field, type, help: every SamplingSettings knob but stop and stop_loops
_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--temperature", "temperature", float, "0: greedy, reproducible"),
    ("--top-k", "top_k", int, "keep the k likeliest tokens (0: all)"),
    ("--top-p", "top_p", float, "keep the likeliest tokens up to this probability"),
    ("--min-p", "min_p", float, "drop tokens below this share of the likeliest one's"),
    ("--repeat-penalty", "repeat_penalty", float, "penalise recent tokens (1: off)"),
    ("--repeat-last-n", "repeat_last_n", int, "tokens the penalties look back over (-1: all)"),
    ("--presence-penalty", "presence_penalty", float, "penalise any token already said"),
    ("--frequency-penalty", "frequency_penalty", float, "penalise tokens by how often said"),
    ("--dry-multiplier", "dry_multiplier", float, "DRY: penalise repeated sequences (0: off)"),
    ("--dry-base", "dry_base", float, "DRY: growth of the penalty with the sequence's length"),
    ("--dry-allowed-length", "dry_allowed_length", int, "DRY: sequences this long are free"),
    ("--dry-last-n", "dry_last_n", int, "DRY: tokens it looks back over (-1: all)"),
    ("--seed", "seed", int, "seed of the draws (default: the model's, random)"),
)


def add_sampling_options(
    parser: argparse.ArgumentParser, defaults: SamplingSettings, max_tokens: bool = True
) -> None:
    """The sampling flags, their help showing the command's defaults."""
    group = parser.add_argument_group("sampling")
    for flag, field, kind, text in _FLAGS:
        default = getattr(defaults, field)
        shown = "" if default is None else f" (default: {default})"
        group.add_argument(flag, type=kind, default=None, dest=field, help=text + shown)
    if max_tokens:
        group.add_argument(
            "--max-tokens", type=int, default=None, dest="max_tokens",
            help=f"longest reply in tokens (default: {defaults.max_tokens})",
        )  # fmt: skip
    group.add_argument(
        "--stop", action="append", default=[], metavar="TEXT",
        help="end the reply at this text (repeatable)",
    )  # fmt: skip
    group.add_argument(
        "--no-loop-guard", dest="stop_loops", action="store_false", default=True,
        help="let a reply that repeats itself run on to its limit",
    )  # fmt: skip


def sampling_from(args: argparse.Namespace, defaults: SamplingSettings) -> SamplingSettings:
    """The command's defaults with the flags given; BadInputError for a refused value."""
    fields = [f for _flag, f, _kind, _text in _FLAGS] + ["max_tokens"]
    changes = {f: getattr(args, f) for f in fields if getattr(args, f, None) is not None}
    changes["stop"] = (*defaults.stop, *args.stop)
    changes["stop_loops"] = args.stop_loops
    try:
        return defaults.with_changes(**changes)
    except ValueError as exc:
        raise BadInputError(str(exc)) from exc
