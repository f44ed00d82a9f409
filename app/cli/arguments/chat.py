"""`shardchat chat`: what it accepts (app.cli.commands.chat_command runs it)."""

from __future__ import annotations

import argparse

from app.cli.arguments.arg_types import add_prompt_format_option, positive_int, size
from app.cli.arguments.run_later import run_later
from app.cli.arguments.sampling_options import add_sampling_options
from engine.generation.sampling import SamplingSettings


def add_chat_command(commands: argparse._SubParsersAction) -> None:
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
    _add_format_options(chat)
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
    chat.set_defaults(command="chat", run=run_later("app.cli.commands.chat_command", "run_chat"))


def _add_format_options(chat: argparse.ArgumentParser) -> None:
    add_prompt_format_option(chat)
    chat.add_argument(
        "--verbose", action="store_true", default=argparse.SUPPRESS,
        help="as shardchat --verbose, and say which prompt format the model got and why",
    )  # fmt: skip
