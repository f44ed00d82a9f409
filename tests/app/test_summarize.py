"""A real summarisation job on a generated folder: mixed documents, bad cases, a kill, a resume.

The job runs as people run it, through `shardchat summarize` in a child process
with the default model; the kill is a real SIGKILL part-way through.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from docx import Document as DocxDocument

from app.stores.job_store import JobStore
from app.summaries.summary_job import JobOutcome, SummaryJob, SummarySettings
from app.summaries.summary_output import summary_path
from engine.cancel import CancelToken
from engine.machine.profile import Profile
from engine.planning.parallelism import choose_parallelism
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan

SHARDCHAT = str(Path(sys.executable).parent / "shardchat")
RECORDED = Path(__file__).resolve().parents[1] / "data" / "profile-epyc-2core-fast.json"
FAST = ("--max-words", "15", "--ctx", "768", "--parallel", "4")
PROSE = (
    "The harbour town woke early. Fishermen checked their nets, the baker lit the ovens, "
    "and the ferry captain read the tide tables twice. "
)


def make_folder(root: Path) -> Path:
    """Six readable documents (one long enough to need map-reduce) and every bad case."""
    folder = root / "docs"
    (folder / "sub dir" / "ünïcode").mkdir(parents=True)
    (folder / "a.txt").write_text(PROSE * 3)
    (folder / "notes.md").write_text("# Plan\n\n- buy sails\n- paint the hull\n")
    (folder / "tool.py").write_text("def add(a, b):\n    return a + b\n")
    (folder / "sub dir" / "page.html").write_text(
        "<html><script>var x=1;</script><body><p>The council met on Tuesday.</p></body></html>"
    )
    (folder / "sub dir" / "ünïcode" / "latin1 ñame.txt").write_bytes(
        ("Café owners in Málaga raised prices. " * 6).encode("cp1252")
    )
    report = DocxDocument()
    report.add_paragraph("Quarterly report: sales rose by a tenth while costs stayed flat.")
    report.save(folder / "report.docx")
    long_text = "\n\n".join(f"Chapter {i}. " + PROSE * 6 for i in range(8))  # > one context
    (folder / "long.txt").write_text(long_text)
    (folder / "empty.txt").write_text("")
    (folder / "blob.bin").write_bytes(bytes(range(256)) * 8)
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 not really a pdf")
    (folder / "loop").symlink_to(folder, target_is_directory=True)
    return folder


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink() and "loop" not in p.parts
    }


def summarize(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SHARDCHAT, "summarize", *args], capture_output=True, text=True, timeout=timeout,
        env=os.environ.copy(),
    )  # fmt: skip


def test_a_killed_job_resumes_and_every_document_gets_its_outcome(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    out = tmp_path / "out"
    before = digest(folder)
    child = subprocess.Popen(
        [SHARDCHAT, "summarize", str(folder), "--out", str(out), *FAST],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy(),
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while not list(out.rglob("*.txt.md")) and time.monotonic() < deadline:
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    first = {p: p.stat().st_mtime_ns for p in out.rglob("*.md") if p.name != "report.md"}
    assert first, "the job wrote nothing before it was killed"

    done = summarize(str(folder), "--out", str(out), *FAST, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    outcome = {f["file"]: f for f in report["files"]}
    readable = ["a.txt", "long.txt", "notes.md", "report.docx", "sub dir/page.html",
                "sub dir/ünïcode/latin1 ñame.txt", "tool.py"]  # fmt: skip
    for name in readable:
        assert outcome[name]["status"] == "done", outcome[name]
        summary = summary_path(out, name, set(outcome))
        assert summary.read_text().strip(), name
        assert outcome[name]["tokens_in"] > 0 and outcome[name]["tokens_out"] > 0
    assert outcome["empty.txt"]["status"] == "skipped" and "empty" in outcome["empty.txt"]["error"]
    assert outcome["blob.bin"]["status"] == "skipped" and outcome["blob.bin"]["error"]
    assert outcome["broken.pdf"]["status"] in ("skipped", "failed")
    assert outcome["loop"]["status"] == "skipped" and "symlink" in outcome["loop"]["error"]
    assert not any(name.startswith("loop/") for name in outcome)  # the loop was not followed
    assert "parts" in (out / "long.txt.md").read_text()  # map-reduce: summarised in parts
    for path, mtime in first.items():  # finished before the kill: not summarised again
        assert path.stat().st_mtime_ns == mtime, path
    assert not list(out.rglob("*.tmp")) and digest(folder) == before  # inputs untouched
    assert (out / "report.md").read_text().count("| done |") == len(readable)


def test_cancelling_keeps_finished_summaries_and_the_rest_pending(
    tmp_path: Path, default_model
) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(6):
        (folder / f"doc{i}.txt").write_text(f"Document {i}. " + PROSE)
    cancel = CancelToken()
    finished: list[str] = []

    def progress(p) -> None:  # noqa: ANN001 - JobProgress
        if p.finished is not None:
            finished.append(p.finished.path)
            cancel.cancel()

    settings = SummarySettings(max_words=10, parallel=2, n_ctx_per_sequence=512)
    with JobStore(tmp_path / "jobs.sqlite3") as store:
        outcome = SummaryJob(
            default_model, folder, tmp_path / "out", settings, store, progress, cancel
        ).run()
    statuses = {r.path: r.status for r in outcome.records}
    assert outcome.cancelled and finished
    assert statuses[finished[0]] == "done" and list(statuses.values()).count("pending") >= 3


@pytest.mark.parametrize(
    ("make_args", "message"),
    [
        (lambda tmp: [str(tmp / "nowhere")], "does not exist"),
        (lambda tmp: [str(tmp / "file.txt")], "is a file, not a folder"),
        (
            lambda tmp: [str(tmp / "in"), "--out", str(tmp / "in" / "out")],
            "inside the input folder",
        ),
    ],
)
def test_bad_folders_are_refused_in_one_line(tmp_path: Path, make_args, message: str) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "file.txt").write_text("x")
    done = summarize(*make_args(tmp_path))
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr.count("\n") == 1 and message in done.stderr and "Traceback" not in done.stderr
    )
    assert not (tmp_path / "in" / "out").exists()


def test_an_empty_folder_is_nothing_to_do(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = summarize(str(tmp_path / "empty"))
    assert done.returncode == 0, done.stderr
    assert "no documents" in done.stdout
    assert json.loads((tmp_path / "empty-summaries" / "report.json").read_text())["files"] == []


def test_a_document_of_many_parts_is_reduced_in_rounds_and_nothing_is_cut(
    tmp_path: Path, default_model
) -> None:
    folder = tmp_path / "book"
    folder.mkdir()
    chapters = [f"Chapter {i}. " + PROSE * 4 for i in range(10)]
    (folder / "book.txt").write_text("\n\n".join(chapters))
    settings = SummarySettings(max_words=30, parallel=4, n_ctx_per_sequence=512)
    with JobStore(tmp_path / "jobs.sqlite3") as store:
        outcome = SummaryJob(default_model, folder, tmp_path / "out", settings, store).run()
    (record,) = outcome.records
    assert record.status == "done", record.error
    footer = (tmp_path / "out" / "book.txt.md").read_text().rsplit("---", 1)[1]
    parts = int(footer.split(" parts")[0].rsplit("· ", 1)[1])
    assert parts >= 5  # more parts than one combining prompt of 512 tokens can hold


def test_the_planner_chooses_the_parallelism_unless_the_user_does(
    tmp_path: Path, default_model
) -> None:
    folder = tmp_path / "few"
    folder.mkdir()
    for i in range(5):
        (folder / f"note{i}.txt").write_text(f"Note {i}. " + PROSE)
    profile = Profile.from_json(RECORDED.read_text(encoding="utf-8"))
    plan = make_plan(default_model.inventory, profile, PlanRequest(0, n_ctx=512))
    expected = choose_parallelism(plan, profile, default_model.inventory, 5, 512)
    seen: list[int] = []

    def run(settings: SummarySettings, out: str) -> JobOutcome:
        with JobStore(tmp_path / "jobs.sqlite3") as store:
            return SummaryJob(
                default_model, folder, tmp_path / out, settings, store,
                lambda p: seen.append(p.parallel), plan=plan, profile=profile,
            ).run()  # fmt: skip

    planned = run(SummarySettings(max_words=8, n_ctx_per_sequence=512), "planned")
    assert planned.parallel == expected.n_parallel and planned.count("done") == 5
    assert "planner" in planned.parallel_reason and expected.reason in planned.parallel_reason
    assert set(seen) == {expected.n_parallel}
    overridden = run(SummarySettings(max_words=8, parallel=3, n_ctx_per_sequence=512), "mine")
    assert overridden.parallel == 3 and "--parallel 3" in overridden.parallel_reason
    plain = SummarySettings(max_words=8, n_ctx_per_sequence=512)
    with JobStore(tmp_path / "other.sqlite3") as store:
        unprofiled = SummaryJob(default_model, folder, tmp_path / "plain", plain, store).run()
    assert unprofiled.parallel == 5 and "not profiled" in unprofiled.parallel_reason


def test_a_planned_job_sets_every_step_beside_the_plan(
    tmp_path: Path, default_model, caplog: pytest.LogCaptureFixture
) -> None:
    """The step log watches the job's own scheduler, as it watches the chat's."""
    folder = tmp_path / "two"
    folder.mkdir()
    for i in range(2):
        (folder / f"note{i}.txt").write_text(f"Note {i}. " + PROSE)
    profile = Profile.from_json(RECORDED.read_text(encoding="utf-8"))
    plan = make_plan(default_model.inventory, profile, PlanRequest(0, n_ctx=512))
    settings = SummarySettings(max_words=8, n_ctx_per_sequence=512)
    with caplog.at_level("DEBUG", logger="shardchat.steps"), JobStore(tmp_path / "j.db") as store:
        outcome = SummaryJob(
            default_model, folder, tmp_path / "out", settings, store, plan=plan, profile=profile
        ).run()
    assert outcome.count("done") == 2
    logged = [r.getMessage() for r in caplog.records if r.name == "shardchat.steps"]
    assert logged and all("predicted" in line and "measured" in line for line in logged)
    assert any("tokens -> tier" in line for line in logged)
    assert any("(sequences 1,2)" in line for line in logged), logged  # both documents at once
