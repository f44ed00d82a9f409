"""Argument types for the `shardchat` command line: bad values become argparse errors (exit 2)."""

from __future__ import annotations

import argparse

from app.screen_text.units import parse_size
from engine.errors import BadInputError


def size(text: str) -> int:
    """A byte size such as 6GiB, 512M or 0."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def probability(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError("must be in (0, 1]")
    return value


def prompt_format(text: str) -> str:
    """auto, template, completion or one of llama.cpp's built-in chat formats."""
    # llama.cpp names its built-in formats: imported only when the option is given, so
    # that parsing a command line never loads llama.cpp
    from engine.model.prompt_format import check_format_name

    try:
        return check_format_name(text)
    except BadInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_prompt_format_option(parser: argparse.ArgumentParser) -> None:
    """--prompt-format NAME, the same for every command that loads a model."""
    parser.add_argument(
        "--prompt-format", type=prompt_format, default=None, metavar="NAME",
        help="how prompts are written: auto (the model's chat template, else the format its "
        "vocabulary's special tokens belong to, else plain completion), template, completion, "
        "or a llama.cpp built-in format (chatml, gemma, llama3, mistral-v7, phi3, ...); "
        "default: the model's setting in the model list, else auto",
    )  # fmt: skip
