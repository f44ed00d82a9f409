"""Opening one of ShardChat's SQLite files, whatever state it was left in.

Each store (profiles, chat history) names its file's identity: its
application_id and the tables and columns it needs. Before connecting, the
file is inspected read-only; a damaged or foreign file is renamed
aside (with its -wal/-shm/-journal files) to `<name>.corrupt-<time>` and a
fresh store starts, so the app neither crashes on it nor deletes the user's
data. A zero-byte file is an empty database, as SQLite reads it: it is also what
a store looks like while another thread creates it. Errors that say nothing about
the file (busy, locked, unreadable, disk full) are reported instead and the file
stays where it is.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

from engine.errors import BadInputError

log = logging.getLogger(__name__)

SQLITE_MAGIC = b"SQLite format 3\x00"
SIDECARS = ("-wal", "-shm", "-journal")
# Failures that say nothing about the file's contents: report them, never move the file.
ENVIRONMENT_ERRORS = (
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_CANTOPEN",
    "SQLITE_IOERR",
    "SQLITE_FULL",
    "SQLITE_PERM",
    "SQLITE_READONLY",
    "SQLITE_NOMEM",
    "SQLITE_INTERRUPT",
)


WAL_WAIT_S = 5.0  # as long as sqlite3.connect's own busy timeout


class UnusableFile(Exception):
    """The file is not a store we can use; the message says why."""


@dataclass(frozen=True)
class StoreIdentity:
    """What makes a file one of ours: a label for messages, an id, the tables we need."""

    label: str  # "profile store", "chat history"
    application_id: int
    tables: tuple[tuple[str, tuple[str, ...]], ...]  # (table, required columns)
    migrations_table: str = "_migrations"


def open_store(
    path: Path, identity: StoreIdentity, connect: Callable[[Path], sqlite3.Connection]
) -> tuple[sqlite3.Connection, Path | None]:
    """Connect, first moving an unusable file aside; returns the connection and where it went."""
    make_folder(path.parent)
    try:
        inspect(path, identity)
        return connect(path), None
    except UnusableFile as exc:
        aside = move_aside(path, str(exc), identity.label)
    return connect(path), aside


def connect_with(
    path: Path, identity: StoreIdentity, set_up: Callable[[sqlite3.Connection], None]
) -> sqlite3.Connection:
    """A read-write autocommit connection prepared by `set_up`; SQLite errors classified."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        set_up(conn)
    except BaseException as exc:
        conn.close()
        reraise_classified(path, exc, identity.label)
        raise
    return conn


def use_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL mode, waiting while another connection holds it.

    Changing the journal mode takes SQLite's exclusive lock without calling the
    busy handler, so two threads creating the same store at once (the hub store on
    a first run: Discover's suggestions beside a download's worker) got "database
    is locked" at once. The retry ends as soon as the other connection is done;
    by then the file usually is in WAL mode already and the pragma is a no-op.
    """
    for attempt in Retrying(
        retry=retry_if_exception(_is_locked),
        wait=wait_random_exponential(multiplier=0.005, max=0.2),
        stop=stop_after_delay(WAL_WAIT_S),
        reraise=True,
    ):
        with attempt:
            conn.execute("PRAGMA journal_mode = WAL")


def _is_locked(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and getattr(
        exc, "sqlite_errorname", ""
    ).startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception (incl. KeyboardInterrupt)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"cannot create {folder}: {exc.strerror or exc}") from exc


def inspect(path: Path, identity: StoreIdentity) -> None:
    """Raise UnusableFile unless `path` is absent or a sound store of this identity.

    Reads only: the header bytes, then a read-only connection, so a foreign
    database (even one in WAL mode) is left byte for byte as it was.
    """
    if not path.exists():
        return
    if not path.is_file():
        raise BadInputError(f"{path} should be the {identity.label} file but is not a file")
    header = _read_header(path)
    if not header:
        # SQLite's own reading: a zero-byte file is an empty database. It is also
        # what a store looks like while another thread or process creates it (the
        # file exists before its first page), so moving it aside would lose theirs.
        return
    if not header.startswith(SQLITE_MAGIC):
        raise UnusableFile("not an SQLite database")
    conn = _connect_read_only(path, identity.label)
    try:
        # one read transaction, so every check sees one state of the file: read in separate
        # statements, another thread's first migration could commit between reading the
        # application_id (still 0) and the tables (now there), a "foreign database"
        conn.execute("BEGIN")
        _check_identity(conn, identity)
        _check_integrity(conn)
    except BaseException as exc:
        reraise_classified(path, exc, identity.label)
        raise
    finally:
        conn.close()


def reraise_classified(path: Path, exc: BaseException, label: str) -> None:
    """Turn an sqlite3 error into UnusableFile (the file is bad) or BadInputError (we can't tell).

    Busy, locked, unreadable or full-disk errors say nothing about the file,
    so the file must stay where it is; anything else from SQLite means its
    contents are not a database we can use. Non-sqlite exceptions pass through.
    """
    if not isinstance(exc, sqlite3.Error):
        return
    name = getattr(exc, "sqlite_errorname", None)  # Python 3.11+
    environmental = (
        name.startswith(ENVIRONMENT_ERRORS) if name else isinstance(exc, sqlite3.OperationalError)
    )
    if environmental:
        raise BadInputError(f"cannot open the {label} {path}: {one_line(exc)}") from exc
    raise UnusableFile(one_line(exc)) from exc


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def move_aside(path: Path, reason: str, label: str) -> Path:
    """Rename the file (and its -wal/-shm/-journal) to a free .corrupt-<time> name; never delete."""
    aside = _free_aside_name(path)
    try:
        os.replace(path, aside)
        for suffix in SIDECARS:
            sidecar = path.with_name(path.name + suffix)
            if sidecar.exists():
                os.replace(sidecar, aside.with_name(aside.name + suffix))
    except OSError as exc:
        raise BadInputError(
            f"the {label} {path} is unusable ({reason}) and cannot be moved aside: "
            f"{exc.strerror or exc}"
        ) from exc
    log.warning("%s %s was unusable (%s); moved it to %s and started a fresh one",
                label, path, reason, aside)  # fmt: skip
    return aside


def _read_header(path: Path) -> bytes:
    try:
        with path.open("rb") as file:
            return file.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise BadInputError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _connect_read_only(path: Path, label: str) -> sqlite3.Connection:
    try:
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        reraise_classified(path, exc, label)
        raise


def _check_identity(conn: sqlite3.Connection, identity: StoreIdentity) -> None:
    """Ours: our application_id with usable tables, or unmarked and (nearly) empty."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    if app_id == identity.application_id:
        for table, columns in identity.tables:
            present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if not set(columns) <= present:
                raise UnusableFile(f"a ShardChat {identity.label} without a usable {table} table")
        return
    if app_id != 0:
        raise UnusableFile(f"another application's database (application_id {app_id:#x})")
    tables = {
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    }
    unexpected = tables - {identity.migrations_table}
    if unexpected:
        raise UnusableFile(f"a foreign database (tables: {', '.join(sorted(unexpected))})")


def _check_integrity(conn: sqlite3.Connection) -> None:
    problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
    if problems != ["ok"]:
        raise UnusableFile(f"damaged: {'; '.join(problems[:3])}")


def _free_aside_name(path: Path) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = path.with_name(f"{path.name}.corrupt-{stamp}")
    candidate, counter = base, 1
    while any(candidate.with_name(candidate.name + s).exists() for s in ("", *SIDECARS)):
        counter += 1
        candidate = base.with_name(f"{base.name}-{counter}")
    return candidate
