"""Parsing a command line imports nothing heavy: `--help`, `--version`, a usage error and
`shardchat chats` answer without llama.cpp, Qt, the Hub's client, aiohttp or numpy, each
of which only the command that needs it imports (app.cli.arguments.run_later)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("llama_cpp", "PySide6", "huggingface_hub", "aiohttp", "numpy", "gguf")
IMPORTED_BY = """
import json, sys
from app.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = [name for name in {heavy!r} if name in sys.modules]
print(json.dumps({{"code": code, "heavy": heavy}}), file=sys.stderr)
"""


def imported_by(*argv: str) -> dict[str, object]:
    """The exit code of `shardchat ARGV` in a fresh interpreter, and which heavy modules it
    had imported by the end."""
    run = subprocess.run(
        [sys.executable, "-c", IMPORTED_BY.format(heavy=HEAVY), *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    said: dict[str, object] = json.loads(run.stderr.strip().splitlines()[-1])
    return said


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (("--help",), 0),
        (("--version",), 0),
        (("chat", "--help"), 0),
        (("models", "search", "--help"), 0),
        (("serve", "--help"), 0),
        (("nosuchcommand",), 2),
        (("chat", "--ctx", "many"), 2),
        (("chats",), 0),
    ],
)
def test_the_command_line_answers_without_importing_heavy_modules(
    argv: tuple[str, ...], code: int
) -> None:
    said = imported_by(*argv)
    assert said == {"code": code, "heavy": []}


def test_a_command_that_runs_imports_what_it_needs() -> None:
    """The check can fail: a command that loads a model has imported llama.cpp by its end."""
    said = imported_by("info", "default")
    assert said["code"] == 0 and "llama_cpp" in said["heavy"]  # type: ignore[operator]
