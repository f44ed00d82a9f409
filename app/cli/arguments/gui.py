"""`shardchat gui`: what it accepts (app.cli.commands.gui_command runs it)."""

from __future__ import annotations

import argparse

from app.cli.arguments.arg_types import positive_int
from app.cli.arguments.run_later import run_later


def add_gui_command(commands: argparse._SubParsersAction) -> None:
    gui = commands.add_parser(
        "gui",
        help="open the desktop window (the terminal chat where there is no display)",
        description="Open ShardChat's window on a model (the embedded default unless --model).",
    )
    gui.add_argument("--model", "-m", metavar="PATH", help="GGUF model file")
    gui.add_argument("--ctx", type=positive_int, default=4096, help="context window in tokens")
    gui.set_defaults(
        command="gui", run=run_later("app.cli.commands.gui_command", "run_gui_command")
    )
