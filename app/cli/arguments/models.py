"""`shardchat models`: what it accepts (app.cli.commands.models_command runs the list, remove,
import and folder actions, app.cli.commands.models_hub_command the Hub's)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from app.cli.arguments.arg_types import positive_int, size
from app.cli.arguments.run_later import run_later
from app.hub.search_order import SORT_KEYS


def add_models_command(commands: argparse._SubParsersAction) -> None:
    models = commands.add_parser(
        "models",
        help="search Hugging Face, predict speed here, download and manage models",
        description="Find GGUF models on Hugging Face, see how fast each quant would run on "
        "this machine before downloading it, download it, and manage the model list.",
    )
    models.set_defaults(command="models", run=_usage(models))
    actions = models.add_subparsers(title="actions", metavar="ACTION")
    add_search(actions)
    add_show(actions)
    add_pull(actions)
    _add_list(actions)
    _add_remove(actions)
    _add_import(actions)
    add_token(actions)
    _add_folder(actions)


def _add_list(actions: argparse._SubParsersAction) -> None:
    listing = actions.add_parser("list", help="the model list, and unfinished downloads")
    listing.add_argument("--json", action="store_true", help="print as JSON")
    listing.set_defaults(run=run_later("app.cli.commands.models_command", "run_list"))


def _add_remove(actions: argparse._SubParsersAction) -> None:
    remove = actions.add_parser("remove", help="take a model off the list")
    remove.add_argument("name", metavar="NAME", help="its path, file name or name as listed")
    remove.add_argument("--delete-file", action="store_true", help="delete the file too")
    remove.set_defaults(run=run_later("app.cli.commands.models_command", "run_remove"))


def _add_import(actions: argparse._SubParsersAction) -> None:
    imports = actions.add_parser(
        "import",
        help="list GGUF models where they already are (files, folders, other tools' caches)",
        description="Add GGUF models to the model list in place (nothing is copied): files, "
        "folders searched recursively, the Hugging Face cache, LM Studio's models folder.",
    )
    imports.add_argument("paths", nargs="*", metavar="PATH", help="GGUF files or folders")
    imports.add_argument("--hf-cache", action="store_true", help="the Hugging Face cache")
    imports.add_argument("--lmstudio", action="store_true", help="LM Studio's models folder")
    imports.set_defaults(run=run_later("app.cli.commands.models_command", "run_import"))


def _add_folder(actions: argparse._SubParsersAction) -> None:
    folder = actions.add_parser("folder", help="where downloads go, and the disk they use")
    folder.add_argument("dir", nargs="?", metavar="DIR", help="send later downloads here")
    folder.set_defaults(run=run_later("app.cli.commands.models_command", "run_folder"))


def add_search(actions: argparse._SubParsersAction) -> None:
    search = actions.add_parser("search", help="search the Hub for GGUF repositories")
    search.add_argument("query", metavar="QUERY", help="words in the repository's name")
    search.add_argument("--kind", choices=("text", "moe", "vision"), help="only this kind")
    search.add_argument("--sort", choices=tuple(SORT_KEYS), default="downloads")
    search.add_argument("--limit", type=positive_int, default=20)
    search.add_argument(
        "--max-params", type=_param_count, metavar="N", help="at most N parameters (e.g. 14B)"
    )
    search.add_argument(
        "--fits",
        action="store_true",
        help="only models whose 4-bit quant fits this machine's RAM and VRAM (needs its profile)",
    )
    search.add_argument("--json", action="store_true", help="print the results as JSON")
    search.set_defaults(run=run_later("app.cli.commands.models_hub_command", "run_search"))


def add_show(actions: argparse._SubParsersAction) -> None:
    show = actions.add_parser(
        "show",
        help="a repository's quants with the predicted speed on this machine",
        description="Read only the header of each GGUF in REPO (HTTP range requests), plan it "
        "for this machine's profile and VRAM budget, and print the prediction per quant.",
    )
    show.add_argument("repo", metavar="REPO", help="owner/name")
    show.add_argument("--revision", default="main", help="branch, tag or commit")
    show.add_argument("--vram", type=size, metavar="SIZE", help="VRAM budget (default: the GPU)")
    show.add_argument("--ctx", type=positive_int, default=4096, help="context length to plan for")
    show.add_argument(
        "--hardware", metavar="PROFILE", help="plan for a profile file or described machine"
    )
    show.add_argument("--json", action="store_true", help="print as JSON")
    show.set_defaults(run=run_later("app.cli.commands.models_hub_command", "run_show"))


def add_pull(actions: argparse._SubParsersAction) -> None:
    pull = actions.add_parser(
        "pull",
        help="download a model (resumable, verified) and add it to the model list",
        description="Download REPO's recommended quant, or the quant or file named after a "
        "colon, with its vision projector. An interrupted pull resumes where it stopped.",
    )
    pull.add_argument("target", metavar="REPO[:QUANT|:FILE]")
    pull.add_argument("--revision", default="main", help="branch, tag or commit")
    pull.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    pull.set_defaults(run=run_later("app.cli.commands.models_hub_command", "run_pull"))


def add_token(actions: argparse._SubParsersAction) -> None:
    token = actions.add_parser(
        "token",
        help="keep a Hugging Face token (read from standard input) for gated repositories",
    )
    token.add_argument("--forget", action="store_true", help="remove the token kept here")
    token.set_defaults(run=run_later("app.cli.commands.models_hub_command", "run_token"))


def _usage(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2

    return run


def _param_count(text: str) -> int:
    units = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
    text = text.strip().lower()
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a parameter count (e.g. 14B)") from None
