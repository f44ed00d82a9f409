"""`shardchat gui`: the desktop window, or the terminal chat where there is no display.

Qt is imported only when the window really opens, so the rest of the command
line (and headless machines) never load it. Where Qt's platform plugin would
not load (system libraries missing), one line names the packages to install
and, on a terminal, the terminal chat starts instead of Qt aborting.
"""

from __future__ import annotations

import argparse
import os
import sys

from app.cli.arguments.arg_types import add_prompt_format_option
from app.cli.arguments.sampling_options import add_sampling_options
from app.cli.qt_platform_check import platform_problem
from app.start_up_gc import collect_again, collection_held_off
from engine.generation.sampling import SamplingSettings
from engine.llama.backends import start_ggml_meanwhile

EXIT_CANNOT_START = 2  # the CLI's bad-input code: the fix is on the user's side


def has_display() -> bool:
    """Linux needs X11 or Wayland (or an explicit Qt platform); other systems always draw."""
    if not sys.platform.startswith("linux"):
        return True
    return any(os.environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"))


def library_default() -> str:
    """The model chosen as default in the model manager (the embedded one until then)."""
    from app.stores.model_library import ModelLibrary

    with ModelLibrary() as models:
        return str(models.default_path())


def run_gui_command(args: argparse.Namespace) -> int:
    with collection_held_off():  # until the window is shown (app.start_up_gc)
        return _run_gui_command(args)


def _run_gui_command(args: argparse.Namespace) -> int:
    start_ggml_meanwhile()  # mostly C: it runs beside the imports from here on
    from engine.runtime.loaded_model import inspect_model

    model_path = str(inspect_model(args.model or library_default()).path)
    if not has_display():
        print("shardchat: no display here; starting the terminal chat instead", file=sys.stderr)
        return _terminal_chat(args, model_path)
    problem = platform_problem(os.environ)
    if problem is not None:  # Qt would abort with a message naming the wrong library
        if not _on_a_terminal():
            print(problem.message(), file=sys.stderr)
            return EXIT_CANNOT_START
        print(f"{problem.message()}; starting the terminal chat instead", file=sys.stderr)
        return _terminal_chat(args, model_path)
    from app.engine_host.early_engine import start_engine_early

    early = start_engine_early(model_path, args.ctx)  # loads while Qt is imported
    from ui.gui_main import run_gui  # Qt loads here, and only here

    return run_gui(model_path, n_ctx=args.ctx, model_chosen=args.model is not None, early=early)


def _on_a_terminal() -> bool:
    """Someone can type into the chat (a desktop launcher or a pipe cannot)."""
    return all(stream is not None and stream.isatty() for stream in (sys.stdin, sys.stdout))


def _terminal_chat(args: argparse.Namespace, model_path: str) -> int:
    from app.cli.commands.chat_command import run_chat  # the window never needs it

    collect_again()  # a chat runs for hours
    return run_chat(terminal_chat_args(model_path, args.ctx, args.verbose))


def terminal_chat_args(model_path: str, ctx: int, verbose: bool) -> argparse.Namespace:
    """What `shardchat chat --model MODEL --ctx N` parses to, so the fallback is that chat.

    Built here because the command line imports this module (it cannot import the
    command line back); a test holds it equal to the chat command's own parse."""
    options = argparse.ArgumentParser(add_help=False)
    add_sampling_options(options, SamplingSettings())
    add_prompt_format_option(options)
    chat_args = options.parse_args([])
    vars(chat_args).update(
        prompt=[], model=model_path, system=None, ctx=ctx, threads=None, vram=None,
        placement=None, cpu_only=False, gpu=None, stats=False, show_thinking=False,
        think=None, verbose=verbose, resume=None, lent=False, here=None, split=None,
        conversation_file=None,
    )  # fmt: skip
    return chat_args
