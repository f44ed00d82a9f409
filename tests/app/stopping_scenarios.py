"""Stopping `shardchat summarize` and `shardchat serve` with signals at random moments.

Each trial starts a real process (see cli_forks), waits for the event that puts
it mid-work (the job's row in the job store; the server's "listening" line and
a reply streaming), waits a random delay more, sends the signal(s) and sorts
the outcome: a clean stop, finished before the signal, or a failure (a crash,
a traceback, a hang, a lost summary). tests/app/test_stopping.py runs a seeded
handful per scenario; bench/stop_signals.py runs many and counts the outcomes.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import threading
import time
import urllib.request
from pathlib import Path

from cli_forks import CliForks, Run

from app.summaries.summary_output import summary_path

CLEAN_STOP, FINISHED_FIRST = "stopped cleanly", "finished before the signal"
SUMMARY_ARGS = ("--max-words", "12", "--ctx", "512", "--parallel", "3")
PROSE = (
    "The harbour town woke early. Fishermen checked their nets, the baker lit the ovens, "
    "and the ferry captain read the tide tables twice. "
)


def make_documents(folder: Path, count: int = 6) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"doc{i}.txt").write_text(f"Document {i}. " + PROSE * 2, encoding="utf-8")
    (folder / "notes.md").write_text("# Plan\n\n- buy sails\n- paint the hull\n", encoding="utf-8")
    return folder


def stop_summarize(
    forks: CliForks, documents: Path, trial_dir: Path, rng: random.Random, signals: int,
    number: signal.Signals = signal.SIGINT, latest: float = 2.5, early: bool = False,
) -> str:  # fmt: skip
    """One trial: `signals` signals (a second soon after the first) once the job is running,
    up to `latest` seconds later; `early`: from the start instead (model load, folder scan)."""
    home, out = trial_dir / "home", trial_dir / "out"
    run = forks.start(["summarize", str(documents), "--out", str(out), *SUMMARY_ARGS], _env(home))
    if not early:
        _wait_for_job_row(home / "data" / "jobs.sqlite3", run)
    time.sleep(rng.uniform(0, latest))  # the random moment, after the event
    _signal(run, number, signals, rng)
    code = forks.wait(run)
    failure = _failure(run, code, number)
    if failure:
        return failure
    if code == 0:
        return FINISHED_FIRST
    if code not in _wanted(signals, number):
        return f"exit {code}: {run.errors()[-300:]}"
    started = (out / "report.json").exists()  # an early signal may come before the job does
    if signals == 1 and started and "run the same command again to resume" not in run.errors():
        return f"no word on resuming: {run.errors()[-300:]}"
    return _check_summaries(documents, out, whole=signals == 1 and started) or CLEAN_STOP


def stop_serve(
    forks: CliForks, trial_dir: Path, rng: random.Random, signals: int,
    number: signal.Signals = signal.SIGTERM, latest: float = 1.5,
) -> str:  # fmt: skip
    """One trial: the signal(s) while a streamed reply is being decoded (up to `latest` s in)."""
    run = forks.start(
        ["serve", "--port", "0", "--parallel", "2", "--ctx-per-slot", "512"],
        _env(trial_dir / "home"),
    )  # fmt: skip
    run.wait_for_output("listening on ")
    listening = run.output().split("listening on ", 1)[1]
    address, model = listening.split()[0], listening.split("(model ", 1)[1].split(")")[0]
    streaming = threading.Event()
    client = threading.Thread(target=_stream_a_reply, args=(address, model, streaming), daemon=True)
    client.start()
    streaming.wait(60)
    time.sleep(rng.uniform(0, latest))
    _signal(run, number, signals, rng)
    code = forks.wait(run)
    client.join(30)
    failure = _failure(run, code, number)
    if failure:
        return failure
    return CLEAN_STOP if code in _wanted(signals, number) else f"exit {code}: {run.errors()[-300:]}"


def _wanted(signals: int, number: signal.Signals) -> tuple[int, ...]:
    """Exit codes of a clean stop: 0 (serve) or 130 (summarize) after one signal; after two,
    130, or the signal's own default action when the second lands in the interpreter's very
    last moments, after Python has put the default handlers back (nothing is left running
    then, and a default SIGINT or SIGTERM is a plain kill: no finaliser runs), or serve's 0
    when the first one had already stopped it: its reply in flight ended, and it exited,
    within the random gap before the second."""
    return (0, 130) if signals == 1 else (0, 130, -number)


def _env(home: Path) -> dict[str, str]:
    return {"SHARDCHAT_HOME": str(home), "QT_QPA_PLATFORM": "offscreen"}


def _wait_for_job_row(store: Path, run: Run, timeout: float = 120) -> None:
    """Until the job is registered: the model is loaded and the folder scanned."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if store.exists():
            try:
                with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
                    if conn.execute("SELECT count(*) FROM jobs").fetchone()[0]:
                        return
            except sqlite3.Error:  # being created or migrated right now
                pass
        time.sleep(0.02)
    raise TimeoutError(f"the job never started; stderr: {run.errors()[-2000:]}")


def _signal(run: Run, number: signal.Signals, signals: int, rng: random.Random) -> None:
    os.kill(run.pid, number)
    for _ in range(signals - 1):
        time.sleep(rng.uniform(0, 0.3))
        with contextlib.suppress(ProcessLookupError):  # it had stopped before the second one
            os.kill(run.pid, number)


def _failure(run: Run, code: int | None, number: signal.Signals) -> str:
    if code is None:
        return "hang (killed after 60 s)"
    if code < 0 and code != -number:
        return f"crash: {signal.Signals(-code).name}"
    if "Traceback" in run.errors():
        return "traceback: " + run.errors().split("Traceback", 1)[1][-300:]
    return ""


def _check_summaries(documents: Path, out: Path, whole: bool) -> str:
    """Every file the report calls done has its summary; a clean stop leaves no temp file."""
    report = out / "report.json"
    if not report.exists():
        return "" if not whole else "no report.json after a clean stop"
    files = json.loads(report.read_text(encoding="utf-8"))["files"]
    inputs = {f["file"] for f in files}
    for entry in files:
        if entry["status"] == "done" and not summary_path(out, entry["file"], inputs).exists():
            return f"lost summary: {entry['file']} is done in the report but has no summary"
    if whole and list(out.rglob("*.tmp")):
        return "a temp file was left after a clean stop"
    return ""


def _stream_a_reply(address: str, model: str, streaming: threading.Event) -> None:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Tell a long story about the sea."}],
        "max_tokens": 400, "stream": True,
    }  # fmt: skip
    request = urllib.request.Request(
        f"{address}/v1/chat/completions", json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            for _line in response:
                streaming.set()  # the first chunk: a reply is being decoded
    except OSError:  # the server stopped under it: what this trial is about
        pass
    finally:
        streaming.set()
