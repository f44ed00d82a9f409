"""A command's run function, imported only when that command runs.

`shardchat --help`, `--version` and a usage error then answer at once: they never import
llama.cpp, Qt, the Hub's client, aiohttp or numpy, which only the command that runs
needs (tests/app/test_cli_imports.py holds this).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable


def run_later(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        run_now: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(module), function
        )
        return run_now(args)

    run.__qualname__ = f"{module}.{function}"
    return run
