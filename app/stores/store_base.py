"""The part every ShardChat SQLite store shares: opening its file, closing it, transactions.

Why one base: the chat history, the profile store, the model list, the hub store and the
job store each keep one SQLite file in the data folder and must treat it the same way: a
damaged or foreign file is moved aside, never written to or deleted (app.stores.sqlite_file);
the file is in WAL mode, so a reader on another thread never waits for a writer; pending
migrations are applied on open (app.stores.sqlite_migrations), so a file an earlier
ShardChat wrote is upgraded where it is. Written five times, the copies drifted; here a
store says only what differs (its `StoreSchema`) and inherits the rest.

Threads: a store's connection is used only from the thread that opened it (sqlite3's
`check_same_thread`); a thread that needs the same file opens its own store on it.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import ClassVar, TypeVar

from app.paths import app_paths
from app.stores.sqlite_file import StoreIdentity, connect_with, open_store, transaction, use_wal
from app.stores.sqlite_migrations import Migration, apply_migrations

log = logging.getLogger(__name__)

_Store = TypeVar("_Store", bound="SqliteStore")


@dataclass(frozen=True)
class StoreSchema:
    """What one store's file is, and what its connection needs before the store may use it."""

    file_name: str  # in the data folder, where a store opened without a path lives
    identity: StoreIdentity  # how its file is told apart from a damaged or foreign one
    migrations: Sequence[Migration]
    # Queries the store runs, tried (LIMIT 0) once migrated: a file they fail on cannot serve
    # the store, so it is unusable and moved aside rather than failing at the first read.
    probes: tuple[str, ...] = ()
    foreign_keys: bool = False  # SQLite enforces ON DELETE CASCADE only when asked, per connection
    # "NORMAL" where a commit must be cheap enough to make every half second (a streamed
    # reply): in WAL mode an app crash still loses nothing committed. None: SQLite's default.
    synchronous: str | None = None
    # The PRAGMA user_version this ShardChat knows: a newer file is still used (its tables
    # checked out) but with a warning, so a later problem can be traced to the newer version.
    # None: the store does not warn.
    warn_newer_than: int | None = None

    def connect(self, path: Path) -> sqlite3.Connection:
        """A read-write autocommit connection in WAL mode with every migration applied."""
        conn = connect_with(path, self.identity, self._set_up)
        if self.warn_newer_than is not None:
            self._warn_if_newer(conn, path, self.warn_newer_than)
        return conn

    def _set_up(self, conn: sqlite3.Connection) -> None:
        # journal_mode and these pragmas are not transactional, so they come before migrations
        use_wal(conn)
        if self.synchronous is not None:
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        if self.foreign_keys:
            conn.execute("PRAGMA foreign_keys = ON")
        apply_migrations(conn, self.migrations, table=self.identity.migrations_table)
        for probe in self.probes:
            conn.execute(probe + " LIMIT 0")

    def _warn_if_newer(self, conn: sqlite3.Connection, path: Path, known: int) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > known:
            log.warning(
                "%s %s has schema version %d; this ShardChat knows up to %d",
                self.identity.label,
                path,
                version,
                known,
            )


class SqliteStore:
    """One SQLite file behind a store: connects in __init__, use as a context manager.

    `recovered_from` is where a damaged or foreign file was moved on opening (None when
    the file was sound or absent), so the caller can tell the user their old data is kept.
    """

    schema: ClassVar[StoreSchema]

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else app_paths().data_dir / self.schema.file_name
        self.recovered_from: Path | None = None
        self._conn = self._open()

    def close(self) -> None:
        """Close the connection; safe to call more than once."""
        self._conn.close()

    def __enter__(self: _Store) -> _Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _open(self) -> sqlite3.Connection:
        """Connect, moving a damaged or foreign file aside first; never writes to such a file."""
        conn, self.recovered_from = open_store(self.path, self.schema.identity, self.schema.connect)
        return conn

    def _transaction(self) -> AbstractContextManager[None]:
        """BEGIN IMMEDIATE ... COMMIT: each change is whole on disk when the call returns."""
        return transaction(self._conn)
