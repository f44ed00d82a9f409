"""`shardchat summarize`: what it accepts (app.cli.commands.summarize_command runs it)."""

from __future__ import annotations

import argparse

from app.cli.arguments.arg_types import add_prompt_format_option, positive_int
from app.cli.arguments.run_later import run_later
from app.cli.arguments.sampling_options import add_sampling_options
from app.summaries.summary_defaults import DEFAULT_CONTEXT_PER_SEQUENCE
from app.summaries.summary_prompts import DEFAULT_MAX_WORDS
from engine.generation.sampling import SUMMARY_SAMPLING


def add_summarize_command(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "summarize",
        aliases=["summarise"],
        help="summarise every document in a folder (batched, resumable)",
        description=(
            "Summarise every document in FOLDER (text, Markdown, code, HTML, PDF, DOCX) into "
            "Markdown files in an output folder mirroring it, with report.md and report.json. "
            "Run the same command again to resume a stopped job."
        ),
    )
    cmd.add_argument("folder", metavar="FOLDER")
    cmd.add_argument("--out", metavar="DIR", help="output folder (default: FOLDER-summaries)")
    cmd.add_argument("--model", "-m", metavar="PATH", help="GGUF model (default: the default)")
    cmd.add_argument("--parallel", type=positive_int, help="documents decoded together")
    cmd.add_argument("--prompt", help="the instruction ({max_words} is filled in)")
    cmd.add_argument("--max-words", type=positive_int, default=DEFAULT_MAX_WORDS)
    cmd.add_argument(
        "--recursive", action=argparse.BooleanOptionalAction, default=True,
        help="include sub-folders (default: yes)",
    )  # fmt: skip
    cmd.add_argument("--include", action="append", default=[], metavar="GLOB")
    cmd.add_argument("--exclude", action="append", default=[], metavar="GLOB")
    cmd.add_argument(
        "--ctx", type=positive_int, default=DEFAULT_CONTEXT_PER_SEQUENCE,
        help="context per document sequence, in tokens",
    )  # fmt: skip
    cmd.add_argument("--json", action="store_true", help="print report.json when done")
    cmd.add_argument(
        "--force", action="store_true",
        help="summarise again documents already summarised with the same content, model and "
        "settings (default: keep their summaries)",
    )  # fmt: skip
    add_sampling_options(cmd, SUMMARY_SAMPLING, max_tokens=False)
    add_prompt_format_option(cmd)
    cmd.set_defaults(
        command="summarize", run=run_later("app.cli.commands.summarize_command", "run_summarize")
    )
