"""Summarisation jobs and the state of every file in them, in one SQLite file.

A job is what a person asked for (a folder, an output folder, the settings);
each of its files moves pending → done | failed | skipped, and the row is
written when the file's summary is safely on disk. A job killed part-way is
therefore resumed by asking again: the same folder, output and settings find
the unfinished job, and only files not yet done are summarised.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from app.stores.sqlite_file import StoreIdentity
from app.stores.store_base import SqliteStore, StoreSchema

STORE_FILE_NAME = "jobs.sqlite3"
APPLICATION_ID = 0x53684A62  # "ShJb": ShardChat's summarisation jobs
MIGRATIONS_TABLE = "_migrations"
PENDING, DONE, FAILED, SKIPPED = "pending", "done", "failed", "skipped"
_JOB_COLUMNS = ("id", "input_folder", "output_folder", "settings_json", "status", "created_at")
_FILE_COLUMNS = (
    "job_id", "path", "status", "pages", "characters", "tokens_in", "tokens_out", "seconds",
    "error", "note",
)  # fmt: skip
# A store written before m002 lacks files.note until it is migrated, so it is not required
# (moving such a store aside would lose an earlier version's jobs).
_FIRST_FILE_COLUMNS = tuple(c for c in _FILE_COLUMNS if c != "note")
_IDENTITY = StoreIdentity(
    "job store", APPLICATION_ID, (("jobs", _JOB_COLUMNS), ("files", _FIRST_FILE_COLUMNS)),
    MIGRATIONS_TABLE,
)  # fmt: skip


def m001_jobs(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE jobs ("
        " id INTEGER PRIMARY KEY,"
        " input_folder TEXT NOT NULL,"
        " output_folder TEXT NOT NULL,"
        " settings_json TEXT NOT NULL,"
        " status TEXT NOT NULL,"  # running | finished | cancelled
        " created_at TEXT NOT NULL)"
    )
    conn.execute(
        "CREATE TABLE files ("
        " job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
        " path TEXT NOT NULL,"  # relative to the input folder
        " status TEXT NOT NULL,"
        " pages INTEGER, characters INTEGER,"
        " tokens_in INTEGER NOT NULL DEFAULT 0, tokens_out INTEGER NOT NULL DEFAULT 0,"
        " seconds REAL NOT NULL DEFAULT 0, error TEXT,"
        " PRIMARY KEY (job_id, path))"
    )
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")


def m002_file_notes(conn: sqlite3.Connection) -> None:
    """A note beside a file's outcome that is not an error (a summary that began to loop)."""
    conn.execute("ALTER TABLE files ADD COLUMN note TEXT")


def m003_file_fingerprints(conn: sqlite3.Connection) -> None:
    """What a done file's summary was made from (its content, the model, the settings), so a
    later job keeps the summary of a file that has not changed instead of redoing it."""
    conn.execute("ALTER TABLE files ADD COLUMN fingerprint TEXT")


MIGRATIONS = (m001_jobs, m002_file_notes, m003_file_fingerprints)
# foreign keys: a job's files go with it
_SCHEMA = StoreSchema(STORE_FILE_NAME, _IDENTITY, MIGRATIONS, foreign_keys=True)


@dataclass(frozen=True)
class FileRecord:
    """One input file's outcome, as report.md and report.json show it."""

    path: str  # relative to the input folder, with forward slashes
    status: str
    pages: int | None = None
    characters: int | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0
    error: str | None = None
    note: str | None = None  # said of a file done, e.g. that its summary began to loop

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.path, "status": self.status, "pages": self.pages,
            "characters": self.characters, "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out, "seconds": round(self.seconds, 3), "error": self.error,
            "note": self.note,
        }  # fmt: skip


@dataclass(frozen=True)
class Job:
    id: int
    input_folder: Path
    output_folder: Path
    settings: dict[str, Any]
    status: str
    resumed: bool  # an unfinished job found again, rather than a new one


class JobStore(SqliteStore):
    """Use from one thread; a context manager like the other stores."""

    schema = _SCHEMA

    def start_or_resume(self, input_folder: Path, output_folder: Path, settings: dict) -> Job:
        """The unfinished job for the same folders and settings, or a new one."""
        settings_json = json.dumps(settings, sort_keys=True)
        row = self._conn.execute(
            "SELECT id FROM jobs WHERE input_folder = ? AND output_folder = ? AND"
            " settings_json = ? AND status != 'finished' ORDER BY id DESC LIMIT 1",
            (str(input_folder), str(output_folder), settings_json),
        ).fetchone()
        if row is not None:
            with self._transaction():
                self._conn.execute("UPDATE jobs SET status = 'running' WHERE id = ?", (row[0],))
            return Job(row[0], input_folder, output_folder, settings, "running", resumed=True)
        with self._transaction():
            cursor = self._conn.execute(
                "INSERT INTO jobs (input_folder, output_folder, settings_json, status, created_at)"
                " VALUES (?, ?, ?, 'running', ?)",
                (str(input_folder), str(output_folder), settings_json, _now()),
            )
        job_id = cursor.lastrowid
        assert job_id is not None  # a successful INSERT always sets it
        return Job(job_id, input_folder, output_folder, settings, "running", False)

    def add_files(self, job_id: int, paths: list[str]) -> None:
        """Register the files found by the scan; files already known keep their state."""
        with self._transaction():
            self._conn.executemany(
                "INSERT OR IGNORE INTO files (job_id, path, status) VALUES (?, ?, 'pending')",
                [(job_id, path) for path in paths],
            )

    def record(self, job_id: int, record: FileRecord, fingerprint: str | None = None) -> None:
        with self._transaction():
            self._conn.execute(
                "INSERT OR REPLACE INTO files (job_id, path, status, pages, characters,"
                " tokens_in, tokens_out, seconds, error, note, fingerprint)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job_id, record.path, record.status, record.pages, record.characters,
                 record.tokens_in, record.tokens_out, record.seconds, record.error, record.note,
                 fingerprint),
            )  # fmt: skip

    def summarised(
        self, input_folder: Path, output_folder: Path
    ) -> dict[str, tuple[str, FileRecord]]:
        """Each file done by any job on these folders, with its fingerprint: the latest one."""
        rows = self._conn.execute(
            "SELECT f.fingerprint, f.path, f.status, f.pages, f.characters, f.tokens_in,"
            " f.tokens_out, f.seconds, f.error, f.note FROM files f JOIN jobs j ON f.job_id = j.id"
            " WHERE j.input_folder = ? AND j.output_folder = ? AND f.status = 'done'"
            " AND f.fingerprint IS NOT NULL ORDER BY j.id",
            (str(input_folder), str(output_folder)),
        ).fetchall()
        return {row[1]: (row[0], FileRecord(*row[1:])) for row in rows}

    def files(self, job_id: int) -> list[FileRecord]:
        rows = self._conn.execute(
            "SELECT path, status, pages, characters, tokens_in, tokens_out, seconds, error, note"
            " FROM files WHERE job_id = ? ORDER BY path",
            (job_id,),
        ).fetchall()
        return [FileRecord(*row) for row in rows]

    def finish(self, job_id: int, status: str) -> None:
        """'finished' when every file has an outcome, 'cancelled' when stopped (resumable)."""
        with self._transaction():
            self._conn.execute("UPDATE jobs SET status = ? WHERE id = ?", (status, job_id))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
