"""`shardchat gui`: the desktop window, or the terminal chat where there is no display.

Qt is imported only when the window really opens, so the rest of the command
line (and headless machines) never load it.
"""

from __future__ import annotations

import argparse
import os
import sys

from app.commands.arg_types import positive_int
from app.model_library import ModelLibrary
from engine.runtime.loaded_model import inspect_model


def add_gui_command(commands: argparse._SubParsersAction) -> None:
    gui = commands.add_parser(
        "gui",
        help="open the desktop window (the terminal chat where there is no display)",
        description="Open ShardChat's window on a model (the embedded default unless --model).",
    )
    gui.add_argument("--model", "-m", metavar="PATH", help="GGUF model file")
    gui.add_argument("--ctx", type=positive_int, default=4096, help="context window in tokens")
    gui.set_defaults(command="gui", run=run_gui_command)


def has_display() -> bool:
    """Linux needs X11 or Wayland (or an explicit Qt platform); other systems always draw."""
    if not sys.platform.startswith("linux"):
        return True
    return any(os.environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"))


def library_default() -> str:
    """The model chosen as default in the model manager (the embedded one until then)."""
    with ModelLibrary() as models:
        return str(models.default().path)


def run_gui_command(args: argparse.Namespace) -> int:
    model_path = str(inspect_model(args.model or library_default()).path)
    if not has_display():
        print("shardchat: no display here; starting the terminal chat instead", file=sys.stderr)
        from app.commands.chat_command import run_chat

        chat_args = argparse.Namespace(
            prompt=[], model=model_path, system=None, temperature=0.7, top_p=0.95,
            max_tokens=512, ctx=args.ctx, threads=None, stats=False, vram=None,
        )  # fmt: skip
        return run_chat(chat_args)
    from ui.gui_main import run_gui  # Qt loads here, and only here

    return run_gui(model_path, n_ctx=args.ctx, model_chosen=args.model is not None)
