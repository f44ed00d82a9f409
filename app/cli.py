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
from importlib.metadata import PackageNotFoundError, version

from app.commands.arg_types import add_prompt_format_option, positive_int, size
from app.commands.ask_image_command import add_ask_image_command
from app.commands.chat_command import run_chat
from app.commands.chats_command import add_chats_command
from app.commands.devices_command import add_devices_command
from app.commands.gui_command import add_gui_command
from app.commands.info_command import run_info
from app.commands.models_command import add_models_command
from app.commands.plan_command import add_plan_command
from app.commands.profile_command import add_profile_command
from app.commands.sampling_options import add_sampling_options
from app.commands.serve_command import add_serve_command
from app.commands.share_command import add_share_command
from app.commands.summarize_command import add_summarize_command
from app.logging_setup import configure_logging
from app.selftest import run_selftest
from engine.errors import BadInputError, ShardChatError
from engine.generation.sampling import SamplingSettings

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
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
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
    _add_chat(commands)
    _add_info(commands)
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


def _add_chat(commands: argparse._SubParsersAction) -> None:
    chat = commands.add_parser(
        "chat",
        help="chat with a model (interactive without PROMPT on a terminal)",
        description="Stream a reply to PROMPT, to standard input when it is piped, or start an "
        "interactive session. Uses the embedded default model unless --model is given.",
    )
    chat.add_argument("prompt", nargs="*", metavar="PROMPT", help="the message to send")
    chat.add_argument("--model", "-m", metavar="PATH", help="GGUF model file")
    chat.add_argument("--system", metavar="TEXT", help="system prompt")
    chat.add_argument("--ctx", type=positive_int, default=4096, help="context window in tokens")
    chat.add_argument("--threads", type=positive_int, default=None, help="CPU threads")
    chat.add_argument(
        "--vram",
        type=size,
        default=None,
        metavar="SIZE",
        help="run under the planner with this VRAM budget (e.g. 6GiB, 0 for CPU only); "
        "needs this machine's profile (shardchat profile)",
    )
    chat.add_argument(
        "--placement",
        default=None,
        metavar="auto|cpu|layers:N|cpu-moe:N",
        help="who places the weights: the planner (auto, the default with --vram), CPU only, "
        "llama.cpp's n_gpu_layers=N, or the experts of the first N blocks in host memory "
        "(MoE); a manual placement that does not fit the budget is refused. Needs this "
        "machine's profile, except cpu",
    )
    chat.add_argument(
        "--cpu-only", action="store_true", help="run on the CPU only (= --placement cpu)"
    )
    chat.add_argument(
        "--gpu", type=int, default=None, metavar="INDEX", help="which GPU (llama.cpp's index)"
    )
    chat.add_argument(
        "--stats", action="store_true", help="print time to first token and tokens/s to stderr"
    )
    _add_chat_format_options(chat)
    add_sampling_options(chat, SamplingSettings())
    chat.add_argument(
        "--show-thinking",
        action="store_true",
        help="print a reasoning model's thinking to stderr (hidden by default)",
    )
    chat.add_argument(
        "--think",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="let a reasoning model think, or not, where its chat template has the switch "
        "(default: the template's own choice)",
    )
    chat.add_argument(
        "--resume",
        type=positive_int,
        default=None,
        metavar="ID",
        help="go on with saved conversation ID (interactive; see: shardchat chats)",
    )
    chat.add_argument(
        "--lent",
        action="store_true",
        help="place what this machine cannot hold on the lent computers (shardchat devices), "
        "in a child process that a lent computer's failure cannot take the chat down with",
    )
    chat.add_argument(
        "--here",
        type=size,
        default=None,
        metavar="SIZE",
        help="with --lent: the memory this machine gives the model (default: what is free, "
        "less 1 GiB)",
    )
    chat.add_argument("--split", default=None, help=argparse.SUPPRESS)  # the supervisor's
    chat.add_argument("--conversation-file", default=None, help=argparse.SUPPRESS)
    chat.set_defaults(command="chat", run=run_chat)


def _add_chat_format_options(chat: argparse.ArgumentParser) -> None:
    add_prompt_format_option(chat)
    chat.add_argument(
        "--verbose", action="store_true", default=argparse.SUPPRESS,
        help="as shardchat --verbose, and say which prompt format the model got and why",
    )  # fmt: skip


def _add_info(commands: argparse._SubParsersAction) -> None:
    info = commands.add_parser(
        "info",
        help="show a model's inventory (sub-layers and their sizes), or the devices",
        description="Read a GGUF file's header (no weights are loaded) and print its "
        "architecture, sizes and per-block sub-layer table. With --devices: the llama.cpp "
        "backends loaded (or skipped, and why), the CPU variant chosen, every device and "
        "the GPU a model would use.",
    )
    info.add_argument("model", metavar="MODEL", nargs="?", help="GGUF file, or 'default'")
    info.add_argument(
        "--devices", action="store_true", help="show backends and devices instead of a model"
    )
    info.add_argument("--json", action="store_true", help="print the inventory as JSON")
    add_prompt_format_option(info)
    info.set_defaults(command="info", run=run_info)


def _version() -> str:
    try:
        return version("shardchat")
    except PackageNotFoundError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
