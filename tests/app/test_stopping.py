"""Ctrl-C and SIGTERM at random moments stop `summarize` and `serve` cleanly; a finished
summary job run again keeps what has not changed.

Every trial is a real `shardchat` process (forked from one helper that imported the
CLI once, tests/app/cli_forks.py) with the default model, signalled after the event
that puts it mid-work plus a seeded random delay. Before the fix, every Ctrl-C during
`summarize` in these scenarios ended in SIGSEGV or SIGABRT (or a hang) and SIGTERM
killed it without a report; bench/stop_signals.py runs the same scenarios many times
and counts the outcomes.
"""

from __future__ import annotations

import random
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_forks import CliForks
from stopping_scenarios import (
    CLEAN_STOP,
    FINISHED_FIRST,
    PROSE,
    make_documents,
    stop_serve,
    stop_summarize,
)

from engine.model.default_model import default_model_path
from engine.model.inventory import read_inventory
from engine.model.model_naming import readable_model_name

FINE = (CLEAN_STOP, FINISHED_FIRST)


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliForks]:
    with CliForks(tmp_path_factory.mktemp("forks")) as helper:
        yield helper


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_documents(tmp_path_factory.mktemp("stopping") / "docs")


@pytest.mark.parametrize(
    ("signals", "number", "trials"),
    [(1, signal.SIGINT, 5), (2, signal.SIGINT, 3), (1, signal.SIGTERM, 2)],
    ids=["ctrl-c", "ctrl-c-twice", "sigterm"],
)
def test_summarize_stops_cleanly_whenever_the_signal_comes(
    forks: CliForks, documents: Path, tmp_path: Path, signals: int, number: int, trials: int
) -> None:
    """Once: stops at the next step, every finished summary kept, exit 130, how to resume.
    Twice: exits at once (130), never freeing the model under the decoding thread."""
    rng = random.Random(28 * signals + number)
    outcomes = [
        stop_summarize(
            forks, documents, tmp_path / f"t{i}", rng, signals, signal.Signals(number), 2.0
        )
        for i in range(trials)
    ]
    assert all(outcome in FINE for outcome in outcomes), outcomes
    assert CLEAN_STOP in outcomes  # the signals did come mid-job


@pytest.mark.parametrize(
    ("signals", "number", "trials"),
    [(1, signal.SIGTERM, 3), (2, signal.SIGINT, 2)],
    ids=["sigterm", "ctrl-c-twice"],
)
def test_serve_stops_cleanly_while_a_reply_streams(
    forks: CliForks, tmp_path: Path, signals: int, number: int, trials: int
) -> None:
    """Once: the reply in flight ends, exit 0. Twice: exit at once (130), the engine worker
    possibly still decoding, so no finaliser may run."""
    rng = random.Random(280 + signals)
    outcomes = [
        stop_serve(forks, tmp_path / f"t{i}", rng, signals, signal.Signals(number))
        for i in range(trials)
    ]
    assert outcomes == [CLEAN_STOP] * trials


def test_a_finished_job_run_again_keeps_what_has_not_changed(
    forks: CliForks, tmp_path: Path
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("Letter A. " + PROSE, encoding="utf-8")
    (folder / "notes.md").write_text("# Plan\n\n- buy sails\n- paint the hull\n")
    out = tmp_path / "out"
    env = {"SHARDCHAT_HOME": str(tmp_path / "home")}

    def summarize(*extra: str) -> str:
        argv = ["summarize", str(folder), "--out", str(out), "--max-words", "8", "--ctx", "512"]
        run = forks.start([*argv, *extra], env)
        assert forks.wait(run, timeout=120) == 0, run.errors()
        return run.output()

    first = summarize()
    assert "2 done" in first and "already summarised" not in first
    summaries = {name: out / name for name in ("a.txt.md", "notes.md")}  # one extension
    written = {name: path.stat().st_mtime_ns for name, path in summaries.items()}
    (folder / "a.txt").write_text("Letter A, rewritten. " + PROSE, encoding="utf-8")

    again = summarize()
    assert "1 already summarised with the same content, model and settings: kept" in again
    assert summaries["notes.md"].stat().st_mtime_ns == written["notes.md"]
    assert summaries["a.txt.md"].stat().st_mtime_ns != written["a.txt.md"]  # its content changed

    kept = summaries["notes.md"].stat().st_mtime_ns
    forced = summarize("--force")
    assert "2 done" in forced and "already summarised" not in forced
    assert summaries["notes.md"].stat().st_mtime_ns != kept
    model = default_model_path()
    display_name = readable_model_name(model, read_inventory(model).name)
    assert display_name in summaries["notes.md"].read_text(encoding="utf-8").rsplit("---", 1)[1]
