"""The summarisation jobs as the window's Jobs view lists them: progress and where output went.

The job store (app.stores.job_store) belongs to the summariser, which writes it
while a job runs. The view only reads: a read-only SQLite connection per look,
one query that counts each job's files by outcome, so listing never takes the
writer's lock, never migrates or repairs the file (opening the store does that,
on the summariser's side), and a missing or unreadable store lists nothing
rather than failing the window.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from app.paths import app_paths
from app.stores.job_store import DONE, FAILED, SKIPPED, STORE_FILE_NAME

log = logging.getLogger(__name__)

REPORT_NAME = "report.md"  # what the summariser writes for people beside the summaries
_QUERY = (
    "SELECT j.id, j.input_folder, j.output_folder, j.status, j.created_at, COUNT(f.path),"
    f" COALESCE(SUM(f.status = '{DONE}'), 0), COALESCE(SUM(f.status = '{FAILED}'), 0),"
    f" COALESCE(SUM(f.status = '{SKIPPED}'), 0)"
    " FROM jobs j LEFT JOIN files f ON f.job_id = j.id GROUP BY j.id ORDER BY j.id DESC"
)


@dataclass(frozen=True)
class JobOverview:
    """One job: its folders, its status word, and how many of its files have an outcome."""

    job_id: int
    input_folder: Path
    output_folder: Path
    status: str  # running | finished | cancelled, as the store says
    created_at: str
    files: int
    done: int
    failed: int
    skipped: int

    @property
    def settled(self) -> int:
        """Files with an outcome (done, failed or skipped): the job's progress."""
        return self.done + self.failed + self.skipped

    @property
    def report(self) -> Path | None:
        """The job's report for people, once written."""
        path = self.output_folder / REPORT_NAME
        return path if path.is_file() else None

    def progress_text(self) -> str:
        """'12 of 40 files · 1 failed' and how the job stands."""
        said = [f"{self.settled} of {self.files} files"]
        if self.failed:
            said.append(f"{self.failed} failed")
        if self.skipped:
            said.append(f"{self.skipped} skipped")
        return " · ".join(said)


def list_jobs(path: Path | None = None) -> list[JobOverview]:
    """Every job in the store, newest first; none when the store is missing or unreadable."""
    path = path or app_paths().data_dir / STORE_FILE_NAME
    if not path.is_file():
        return []
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        try:
            rows = conn.execute(_QUERY).fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:  # locked a moment, damaged, not ours: the view shows none
        log.warning("cannot list the jobs in %s: %s", path, exc)
        return []
    return [_overview(row) for row in rows]


def _overview(row: tuple) -> JobOverview:
    job_id, input_folder, output_folder, status, created_at, files, done, failed, skipped = row
    return JobOverview(
        int(job_id), Path(input_folder), Path(output_folder), str(status), str(created_at),
        int(files), int(done), int(failed), int(skipped),
    )  # fmt: skip
