"""A tiny migration runner for ShardChat's SQLite databases (profiles, later chats and jobs).

Why: a database outlives the version of ShardChat that created it. Each schema
change is a plain function named `m001_...`, `m002_...` taking the connection;
the names applied are recorded in a table inside the database itself, so a
database written by an older ShardChat is upgraded in place on the next open,
and each migration runs exactly once, however often the database is opened.

Each migration runs in its own transaction together with the row recording
it, so a crash part-way leaves the database as it was before that migration
and the migration is simply run again next time. Migrations must therefore
not commit on their own: use `conn.execute`, never `conn.executescript`
(which commits first) or `conn.commit()`. SQLite DDL is transactional, and
so are `PRAGMA user_version` and `PRAGMA application_id`; `PRAGMA
journal_mode` is not, so set it before calling `apply_migrations`.

The style follows simonw/llm's migrations module.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

log = logging.getLogger(__name__)

Migration = Callable[[sqlite3.Connection], object]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def apply_migrations(
    conn: sqlite3.Connection, migrations: Sequence[Migration], table: str = "_migrations"
) -> list[str]:
    """Apply, in the order given, the migrations not yet recorded in `table`; return their names.

    The connection must not be inside a transaction. Two processes opening the
    same database at once are safe: each migration's transaction starts with
    BEGIN IMMEDIATE and checks again, under the write lock, that it is still
    missing.
    """
    _check_names(migrations, table)
    if conn.in_transaction:
        raise ValueError("apply_migrations needs a connection outside any transaction")
    saved_isolation = conn.isolation_level
    conn.isolation_level = None  # we issue BEGIN/COMMIT ourselves
    try:
        _create_table(conn, table)
        done = set(applied_migrations(conn, table))
        applied: list[str] = []
        for migration in migrations:
            if migration.__name__ not in done and _apply_one(conn, migration, table):
                applied.append(migration.__name__)
        return applied
    finally:
        conn.isolation_level = saved_isolation


def applied_migrations(conn: sqlite3.Connection, table: str = "_migrations") -> list[str]:
    """The names recorded in `table`, in the order they were applied (empty if no table yet)."""
    _check_identifier(table)
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    if not exists:
        return []
    return [row[0] for row in conn.execute(f'SELECT name FROM "{table}" ORDER BY rowid')]


def _apply_one(conn: sqlite3.Connection, migration: Migration, table: str) -> bool:
    """Run one migration and record it in one transaction; False if another process beat us."""
    name = migration.__name__
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute(f'SELECT 1 FROM "{table}" WHERE name = ?', (name,)).fetchone():
            conn.execute("ROLLBACK")
            return False
        migration(conn)
        conn.execute(
            f'INSERT INTO "{table}" (name, applied_at) VALUES (?, ?)',
            (name, datetime.now(timezone.utc).isoformat(timespec="seconds")),
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    log.info("applied migration %s", name)
    return True


def _create_table(conn: sqlite3.Connection, table: str) -> None:
    conn.execute(
        f'CREATE TABLE IF NOT EXISTS "{table}" (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)'
    )


def _check_names(migrations: Sequence[Migration], table: str) -> None:
    """Refuse a bad table name or two migrations with one name (the second would never run)."""
    _check_identifier(table)
    names = [m.__name__ for m in migrations]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate migration names: {', '.join(duplicates)}")


def _check_identifier(table: str) -> None:
    if not _IDENTIFIER.fullmatch(table):
        raise ValueError(f"not a plain SQL identifier: {table!r}")
