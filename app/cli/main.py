"""The `shardchat` command line: everything a headless user needs.

Exit codes: 0 ok, 2 bad input (one line on stderr, no traceback), 1 internal
error (one line on stderr, the traceback in the log file). llama.cpp's own
log goes to the log file unless --verbose.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from app.cli.arguments.ask_image import add_ask_image_command
from app.cli.arguments.chat import add_chat_command
from app.cli.arguments.chats import add_chats_command
from app.cli.arguments.devices import add_devices_command
from app.cli.arguments.gui import add_gui_command
from app.cli.arguments.info import add_info_command
from app.cli.arguments.models import add_models_command
from app.cli.arguments.plan import add_plan_command
from app.cli.arguments.profile import add_profile_command
from app.cli.arguments.serve import add_serve_command
from app.cli.arguments.share import add_share_command
from app.cli.arguments.summarize import add_summarize_command
from app.cli.selftest import run_selftest
from app.logging_setup import configure_logging
from engine.errors import BadInputError, ShardChatError

log = logging.getLogger(__name__)

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT = 0, 1, 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.selftest:
        if args.command is not None:
            parser.error("--selftest takes no command")
        return run_selftest(verbose=args.verbose)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    try:
        log_file = configure_logging(verbose=args.verbose)
    except OSError as exc:
        _fail(f"cannot write the log file: {exc}")
        return EXIT_BAD_INPUT
    args.argv = list(sys.argv[1:] if argv is None else argv)  # a supervisor re-runs them
    try:
        return args.run(args)
    except BadInputError as exc:
        _fail(str(exc))
        return EXIT_BAD_INPUT
    except ShardChatError as exc:  # refused or unreachable (the Hub): said, not a bug
        _fail(str(exc))
        return EXIT_INTERNAL
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        log.exception("internal error")
        _fail(f"internal error: {exc} (details in {log_file})")
        return EXIT_INTERNAL


def _fail(message: str) -> None:
    print(f"shardchat: error: {message}", file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shardchat", description="Chat with large local GGUF models on small GPUs."
    )
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument(
        "--verbose", action="store_true", help="show llama.cpp's log on stderr as well"
    )
    parser.add_argument(
        "--selftest",
        action="store_true",
        help="load the default model, answer one prompt and exit (0 when it works; "
        "no display needed)",
    )
    parser.set_defaults(command=None)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    add_chat_command(commands)
    add_info_command(commands)
    add_profile_command(commands)
    add_plan_command(commands)
    add_gui_command(commands)
    add_summarize_command(commands)
    add_ask_image_command(commands)
    add_chats_command(commands)
    add_models_command(commands)
    add_serve_command(commands)
    add_share_command(commands)
    add_devices_command(commands)
    return parser


class _VersionAction(argparse.Action):
    """--version: the installed version, read from the package's metadata only when asked
    (importing importlib.metadata alone costs more than the rest of parsing)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(
            option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
            help="show the program's version number and exit",
        )  # fmt: skip

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("shardchat")
        except PackageNotFoundError:
            installed = "unknown"
        print(f"{parser.prog} {installed}")  # on stdout, as argparse's own version action
        parser.exit()


if __name__ == "__main__":
    sys.exit(main())
