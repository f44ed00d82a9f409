"""What ShardChat keeps about the Hub in one SQLite file: fetched headers and downloads.

Headers: a remote GGUF's header bytes (zlib-compressed; mostly tokenizer text)
per (repository, commit, file), so showing a repository again, or planning it
at a new budget, fetches nothing. A commit names fixed bytes, so an entry never
goes stale; `main` is always resolved to its commit before asking.

Downloads: like the summarisation jobs, what a person asked for (a model's
files: its parts and projector) and each file's state. The bytes themselves are
the truth of progress: a file's `.part` on disk says how far it got, so a
download killed at any point resumes from there on the next start.

Threads: one connection per thread that makes a HubStore (WAL mode), so the
Discover page's workers and the CLI can each open their own.
"""

from __future__ import annotations

import sqlite3
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from app.stores.sqlite_file import StoreIdentity
from app.stores.store_base import SqliteStore, StoreSchema

STORE_FILE_NAME = "hub.sqlite3"
APPLICATION_ID = 0x53684862  # "ShHb"
QUEUED, RUNNING, PAUSED, FAILED, DONE, CANCELLED = (
    "queued", "running", "paused", "failed", "done", "cancelled",
)  # fmt: skip
UNFINISHED = (QUEUED, RUNNING, PAUSED, FAILED)
_DOWNLOAD_COLUMNS = (
    "id", "repo_id", "revision", "model_path", "folder", "status", "error", "created_at",
    "finished_at", "imported_path",
)  # fmt: skip
_FILE_COLUMNS = ("download_id", "path", "size", "sha256", "role", "dest", "status")
_IDENTITY = StoreIdentity(
    "hub store",
    APPLICATION_ID,
    (
        ("headers", ("repo_id", "revision", "path", "header", "fetched_bytes")),
        ("downloads", _DOWNLOAD_COLUMNS),
        ("download_files", _FILE_COLUMNS),
    ),
)


def m001_hub(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE headers ("
        " repo_id TEXT NOT NULL, revision TEXT NOT NULL, path TEXT NOT NULL,"
        " file_size INTEGER, header BLOB NOT NULL, fetched_bytes INTEGER NOT NULL,"
        " created_at TEXT NOT NULL, PRIMARY KEY (repo_id, revision, path))"
    )
    conn.execute(
        "CREATE TABLE downloads ("
        " id INTEGER PRIMARY KEY, repo_id TEXT NOT NULL, revision TEXT NOT NULL,"
        " model_path TEXT NOT NULL,"  # the first part's path in the repository
        " folder TEXT NOT NULL,"  # where its files go
        " status TEXT NOT NULL, error TEXT, created_at TEXT NOT NULL, finished_at TEXT,"
        " imported_path TEXT)"
    )
    conn.execute(
        "CREATE TABLE download_files ("
        " download_id INTEGER NOT NULL REFERENCES downloads(id) ON DELETE CASCADE,"
        " path TEXT NOT NULL, size INTEGER NOT NULL, sha256 TEXT,"
        " role TEXT NOT NULL,"  # part | projector
        " dest TEXT NOT NULL, status TEXT NOT NULL,"  # pending | done
        " PRIMARY KEY (download_id, path))"
    )
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")


MIGRATIONS = (m001_hub,)
# foreign keys: a download's files go with it
_SCHEMA = StoreSchema(STORE_FILE_NAME, _IDENTITY, MIGRATIONS, foreign_keys=True)


@dataclass(frozen=True)
class DownloadFile:
    path: str  # in the repository
    size: int
    sha256: str | None
    role: str  # "part" or "projector"
    dest: Path  # where the verified file is moved
    done: bool

    @property
    def part_path(self) -> Path:
        """Where its bytes gather until verified."""
        return self.dest.with_name(self.dest.name + ".part")


@dataclass(frozen=True)
class Download:
    id: int
    repo_id: str
    revision: str
    model_path: str
    folder: Path
    status: str
    error: str | None
    created_at: str
    imported_path: Path | None
    files: tuple[DownloadFile, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def bytes_on_disk(self) -> int:
        """Verified files whole, the rest as far as their .part files got."""
        return sum(f.size if f.done else _size(f.part_path) for f in self.files)


class HubStore(SqliteStore):
    schema = _SCHEMA

    # -- headers ---------------------------------------------------------------------------------

    def header(self, repo_id: str, revision: str, path: str) -> tuple[bytes, int | None] | None:
        """The cached header bytes and file size, or None."""
        row = self._conn.execute(
            "SELECT header, file_size FROM headers WHERE repo_id = ? AND revision = ? AND path = ?",
            (repo_id, revision, path),
        ).fetchone()
        return None if row is None else (zlib.decompress(row[0]), row[1])

    def keep_header(
        self, repo_id: str, revision: str, path: str, header: bytes, file_size: int | None,
        fetched_bytes: int,
    ) -> None:  # fmt: skip
        with self._transaction():
            self._conn.execute(
                "INSERT OR REPLACE INTO headers VALUES (?, ?, ?, ?, ?, ?, ?)",
                (repo_id, revision, path, file_size, zlib.compress(header, 6), fetched_bytes,
                 _now()),
            )  # fmt: skip

    # -- downloads -------------------------------------------------------------------------------

    def add_download(
        self, repo_id: str, revision: str, model_path: str, folder: Path,
        files: list[DownloadFile],
    ) -> Download:  # fmt: skip
        with self._transaction():
            cursor = self._conn.execute(
                "INSERT INTO downloads (repo_id, revision, model_path, folder, status, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (repo_id, revision, model_path, str(folder), QUEUED, _now()),
            )
            download_id = cursor.lastrowid
            assert download_id is not None
            self._conn.executemany(
                "INSERT INTO download_files VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(download_id, f.path, f.size, f.sha256, f.role, str(f.dest), "pending")
                 for f in files],
            )  # fmt: skip
        return self.download(download_id)

    def download(self, download_id: int) -> Download:
        row = self._conn.execute(
            f"SELECT {', '.join(_DOWNLOAD_COLUMNS)} FROM downloads WHERE id = ?", (download_id,)
        ).fetchone()
        if row is None:
            raise KeyError(download_id)
        return self._with_files(row)

    def downloads(self, statuses: tuple[str, ...] | None = None) -> list[Download]:
        """Downloads newest first, only those in `statuses` when given."""
        rows = self._conn.execute(
            f"SELECT {', '.join(_DOWNLOAD_COLUMNS)} FROM downloads ORDER BY id DESC"
        ).fetchall()
        found = [self._with_files(row) for row in rows]
        return [d for d in found if statuses is None or d.status in statuses]

    def unfinished_for(self, repo_id: str, model_path: str) -> Download | None:
        """A download of the same model that did not finish: asking again resumes it."""
        return next(
            (d for d in self.downloads(UNFINISHED)
             if d.repo_id == repo_id and d.model_path == model_path),
            None,
        )  # fmt: skip

    def set_status(self, download_id: int, status: str, error: str | None = None) -> None:
        finished = _now() if status in (DONE, CANCELLED) else None
        with self._transaction():
            self._conn.execute(
                "UPDATE downloads SET status = ?, error = ?, finished_at = ? WHERE id = ?",
                (status, error, finished, download_id),
            )

    def file_done(self, download_id: int, path: str) -> None:
        with self._transaction():
            self._conn.execute(
                "UPDATE download_files SET status = 'done' WHERE download_id = ? AND path = ?",
                (download_id, path),
            )

    def set_imported(self, download_id: int, model_file: Path) -> None:
        with self._transaction():
            self._conn.execute(
                "UPDATE downloads SET imported_path = ? WHERE id = ?",
                (str(model_file), download_id),
            )

    def _with_files(self, row: tuple[object, ...]) -> Download:
        download_id = int(row[0])  # type: ignore[call-overload]
        files = self._conn.execute(
            "SELECT path, size, sha256, role, dest, status FROM download_files"
            " WHERE download_id = ? ORDER BY role, path",
            (download_id,),
        ).fetchall()
        imported = row[9]
        return Download(
            id=download_id,
            repo_id=str(row[1]),
            revision=str(row[2]),
            model_path=str(row[3]),
            folder=Path(str(row[4])),
            status=str(row[5]),
            error=None if row[6] is None else str(row[6]),
            created_at=str(row[7]),
            imported_path=None if imported is None else Path(str(imported)),
            files=tuple(
                DownloadFile(p, size, sha, role, Path(dest), status == "done")
                for p, size, sha, role, dest, status in files
            ),
        )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
