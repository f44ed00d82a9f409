"""The job store: a job found again by its folders and settings, file states kept across opens."""

from __future__ import annotations

from pathlib import Path

from app.stores.job_store import DONE, FAILED, PENDING, FileRecord, JobStore


def test_the_same_request_resumes_the_unfinished_job(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    settings = {"max_words": 50, "prompt": None}
    with JobStore(path) as store:
        job = store.start_or_resume(tmp_path / "in", tmp_path / "out", settings)
        store.add_files(job.id, ["a.txt", "b/c.md"])
        store.record(job.id, FileRecord("a.txt", DONE, None, 120, 40, 20, 1.5))
        store.finish(job.id, "cancelled")
    with JobStore(path) as store:
        again = store.start_or_resume(tmp_path / "in", tmp_path / "out", dict(settings))
        assert again.id == job.id and again.resumed
        store.add_files(
            again.id, ["a.txt", "b/c.md", "d.txt"]
        )  # a new file joins; a.txt stays done
        states = {r.path: r.status for r in store.files(again.id)}
        assert states == {"a.txt": DONE, "b/c.md": PENDING, "d.txt": PENDING}


def test_other_settings_or_a_finished_job_start_a_new_job(tmp_path: Path) -> None:
    with JobStore(tmp_path / "jobs.sqlite3") as store:
        first = store.start_or_resume(tmp_path / "in", tmp_path / "out", {"max_words": 50})
        other = store.start_or_resume(tmp_path / "in", tmp_path / "out", {"max_words": 80})
        assert other.id != first.id and not other.resumed
        store.finish(first.id, "finished")
        fresh = store.start_or_resume(tmp_path / "in", tmp_path / "out", {"max_words": 50})
        assert fresh.id not in (first.id, other.id)


def test_a_record_is_replaced_not_duplicated(tmp_path: Path) -> None:
    with JobStore(tmp_path / "jobs.sqlite3") as store:
        job = store.start_or_resume(tmp_path / "in", tmp_path / "out", {})
        store.add_files(job.id, ["x.pdf"])
        store.record(job.id, FileRecord("x.pdf", FAILED, error="no text layer (scanned PDF?)"))
        (record,) = store.files(job.id)
        assert record.status == FAILED and record.error.startswith("no text layer")
        assert record.to_dict()["file"] == "x.pdf"
