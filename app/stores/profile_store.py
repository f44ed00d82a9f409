"""The SQLite store of performance profiles: what this machine measured, kept across runs.

Why SQLite: a save is one transaction, so a crash or a full disk mid-save
leaves the previous profile intact; the schema is versioned by
`app.stores.sqlite_migrations`, so a newer ShardChat upgrades the file in place.

Why so careful on open: the file lives in the user's data folder and may be
damaged (a disk error, a copy cut short) or not ours at all. Such a file is
never opened for writing and never deleted: it is moved aside to
`profiles.sqlite3.corrupt-YYYYmmdd-HHMMSS` (with its -wal/-shm/-journal), a
warning is logged, `recovered_from` says where it went, and a fresh store
starts. Profiles can always be measured again; the user's bytes are kept.

Which profile is "newest" is decided by `created_at` (normalised to UTC in
the database column), then by save order. At most `KEEP_PER_BUILD` profiles
are kept per fingerprint and llama.cpp build; the profile just saved is
always kept, so importing an older profile never silently drops it.

The store also keeps what running models taught the cost model under each
profile (engine.planning.step_correction): one row per profile, model file,
plan family and tier, so a model loaded again with the same profile starts from
what its last session learned, and another model or a new profile starts fresh.
A profile pushed out by pruning takes its corrections with it.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import sqlite3
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from app.paths import app_paths
from app.stores.atomic_files import write_text_atomic
from app.stores.remote_machines import RemoteMachines, m003_remote_machines, m004_remote_speed
from app.stores.sqlite_file import StoreIdentity, one_line
from app.stores.store_base import SqliteStore, StoreSchema
from engine.errors import BadInputError
from engine.machine.profile import PROFILE_SCHEMA_VERSION, Profile, ProfileMode
from engine.planning.plan import PlanFamily
from engine.planning.step_correction import Correction, CorrectionKey

log = logging.getLogger(__name__)

STORE_FILE_NAME = "profiles.sqlite3"
MAX_PROFILE_BYTES = 200 * 1024
KEEP_PER_BUILD = 3
APPLICATION_ID = 0x53684368  # "ShCh": marks the file as ShardChat's (PRAGMA application_id)
SCHEMA_VERSION = 4  # PRAGMA user_version after the last migration below
MIGRATIONS_TABLE = "_migrations"

_COLUMNS = ("id", "fingerprint", "llama_build", "mode", "created_at", "described", "json")
_PARSE_ERRORS = (ValueError, TypeError, KeyError, AttributeError)
_IDENTITY = StoreIdentity(
    "profile store", APPLICATION_ID, (("profiles", _COLUMNS),), MIGRATIONS_TABLE
)


def m001_profiles(conn: sqlite3.Connection) -> None:
    """The profiles table, its lookup index, and the marks that say the file is ours."""
    conn.execute(
        "CREATE TABLE profiles ("
        " id INTEGER PRIMARY KEY,"
        " fingerprint TEXT NOT NULL,"
        " llama_build TEXT NOT NULL,"
        " mode TEXT NOT NULL,"
        " created_at TEXT NOT NULL,"
        " described INTEGER NOT NULL,"
        " json TEXT NOT NULL)"
    )
    conn.execute("CREATE INDEX profiles_by_machine ON profiles (fingerprint, llama_build)")
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")


def m002_step_corrections(conn: sqlite3.Connection) -> None:
    """What each model's steps taught the cost model under each profile (one row a key)."""
    conn.execute(
        "CREATE TABLE step_corrections ("
        " profile_key TEXT NOT NULL,"
        " model_key TEXT NOT NULL,"
        " family TEXT NOT NULL,"
        " tier INTEGER NOT NULL,"
        " log_factor REAL NOT NULL,"
        " steps INTEGER NOT NULL,"
        " PRIMARY KEY (profile_key, model_key, family, tier))"
    )
    conn.execute("PRAGMA user_version = 2")


MIGRATIONS = (m001_profiles, m002_step_corrections, m003_remote_machines, m004_remote_speed)
_SCHEMA = StoreSchema(
    STORE_FILE_NAME, _IDENTITY, MIGRATIONS, probes=(f"SELECT {', '.join(_COLUMNS)} FROM profiles",)
)


@dataclass(frozen=True)
class ProfileSaved:
    """What one save changed: the new row, and the older rows it pushed out."""

    profile_id: int
    fingerprint: str
    llama_build: str
    replaced_ids: tuple[int, ...]
    size_bytes: int


@dataclass(frozen=True)
class ProfileSummary:
    """One stored profile, enough to list it without handing out the whole profile."""

    id: int
    fingerprint: str
    llama_build: str
    mode: str
    created_at: str  # UTC, ISO 8601 with microseconds
    described: bool
    size_bytes: int


def default_store_path() -> Path:
    """Where the profile store lives: the app's data folder (honours SHARDCHAT_HOME)."""
    return app_paths().data_dir / STORE_FILE_NAME


class ProfileStore(SqliteStore):
    """Profiles kept in one SQLite file; connects in __init__, use as a context manager."""

    schema = _SCHEMA

    @property
    def remotes(self) -> RemoteMachines:
        """The computers lent to this one (shardchat devices), kept in the same file."""
        return RemoteMachines(self._conn)

    # -- writing -------------------------------------------------------------------------------

    def save(self, profile: Profile) -> ProfileSaved:
        """Store a profile and prune its fingerprint+build to the newest few, in one transaction."""
        text = _encode(profile)
        created = _utc_sort_key(profile.created_at)
        with self._transaction():
            cursor = self._conn.execute(
                "INSERT INTO profiles (fingerprint, llama_build, mode, created_at, described, json)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    profile.fingerprint,
                    profile.llama_build,
                    profile.mode.value,
                    created,
                    int(profile.is_described),
                    text,
                ),
            )
            new_id = int(cursor.lastrowid or 0)
            replaced = self._prune(profile.fingerprint, profile.llama_build, keep_id=new_id)
        saved = ProfileSaved(
            new_id, profile.fingerprint, profile.llama_build, replaced, len(text.encode())
        )
        log.info("saved profile %d for %s (replaced %s)", new_id, profile.fingerprint, replaced)
        return saved

    def _prune(self, fingerprint: str, llama_build: str, keep_id: int) -> tuple[int, ...]:
        """Delete all but the newest KEEP_PER_BUILD rows of fingerprint+build; keep_id stays."""
        others = [
            row[0]
            for row in self._conn.execute(
                "SELECT id FROM profiles WHERE fingerprint = ? AND llama_build = ? AND id != ?"
                " ORDER BY created_at DESC, id DESC",
                (fingerprint, llama_build, keep_id),
            )
        ]
        stale = tuple(sorted(others[KEEP_PER_BUILD - 1 :]))
        for row_id in stale:
            (created,) = self._conn.execute(
                "SELECT created_at FROM profiles WHERE id = ?", (row_id,)
            ).fetchone()
            self._conn.execute(
                "DELETE FROM step_corrections WHERE profile_key = ?",
                (_profile_key(fingerprint, llama_build, created),),
            )
        self._conn.executemany("DELETE FROM profiles WHERE id = ?", [(i,) for i in stale])
        return stale

    def save_corrections(
        self, profile: Profile, model_key: str, corrections: Mapping[CorrectionKey, Correction]
    ) -> int:
        """Keep these corrections of a model under a profile (replacing older ones of the same
        family and tier); returns how many rows were written."""
        rows = [
            (profile_key(profile), model_key, key.family.value, key.tier, c.log_factor, c.steps)
            for key, c in corrections.items()
        ]
        with self._transaction():
            self._conn.executemany(
                "INSERT OR REPLACE INTO step_corrections"
                " (profile_key, model_key, family, tier, log_factor, steps)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
        return len(rows)

    def corrections(self, profile: Profile, model_key: str) -> dict[CorrectionKey, Correction]:
        """What earlier sessions of this model under this profile learned; rows this version
        cannot read (an unknown family) are skipped."""
        rows = self._conn.execute(
            "SELECT family, tier, log_factor, steps FROM step_corrections"
            " WHERE profile_key = ? AND model_key = ?",
            (profile_key(profile), model_key),
        )
        families = {family.value: family for family in PlanFamily}
        return {
            CorrectionKey(families[family], int(tier)): Correction(float(log_factor), int(steps))
            for family, tier, log_factor, steps in rows
            if family in families
        }

    # -- reading -------------------------------------------------------------------------------

    def latest(self, fingerprint: str, llama_build: str | None = None) -> Profile | None:
        """The newest readable profile of this machine (and build, if given), or None."""
        query = "SELECT id, json FROM profiles WHERE fingerprint = ?"
        params: tuple[str, ...] = (fingerprint,)
        if llama_build is not None:
            query += " AND llama_build = ?"
            params += (llama_build,)
        query += " ORDER BY created_at DESC, id DESC"
        for row_id, text in self._conn.execute(query, params):
            profile = self._parse_row(row_id, text)
            if profile is not None:
                return profile
        return None

    def get(self, profile_id: int) -> Profile:
        """One profile by id; a missing or unreadable one is bad input (e.g. a CLI argument)."""
        row = self._conn.execute("SELECT json FROM profiles WHERE id = ?", (profile_id,)).fetchone()
        if row is None:
            raise BadInputError(f"no profile with id {profile_id} in {self.path}")
        try:
            return Profile.from_json(row[0])
        except _PARSE_ERRORS as exc:
            raise BadInputError(
                f"profile {profile_id} in {self.path} is unreadable: {exc}"
            ) from exc

    def list(self) -> builtins.list[ProfileSummary]:
        """Every readable stored profile, newest first; unreadable rows are skipped, warned."""
        rows = self._conn.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM profiles ORDER BY created_at DESC, id DESC"
        ).fetchall()
        return [
            _summary(row)
            for row in rows
            if self._parse_row(row[0], row[_COLUMNS.index("json")]) is not None
        ]

    def _parse_row(self, row_id: int, text: str) -> Profile | None:
        try:
            return Profile.from_json(text)
        except _PARSE_ERRORS as exc:
            log.warning("skipping unreadable profile %d in %s: %s", row_id, self.path, exc)
            return None

    # -- JSON files ----------------------------------------------------------------------------

    def export_json(self, profile: Profile, path: Path) -> Path:
        """Write the profile as indented JSON; atomic, so a crash never leaves half a file."""
        path = Path(path)
        write_text_atomic(path, _encode(profile) + "\n")
        log.info("exported profile of %s to %s", profile.fingerprint, path)
        return path

    def import_json(self, path: Path) -> Profile:
        """Read, check and save a profile file; every problem is one line naming the file."""
        path = Path(path)
        profile = _read_profile_file(path)
        try:
            self.save(profile)
        except BadInputError as exc:
            raise BadInputError(f"{path}: {exc}") from exc
        return profile


# -- keys of the corrections -------------------------------------------------------------------


def profile_key(profile: Profile) -> str:
    """A profile's identity: its machine, llama.cpp build and when it was measured (a new
    profile's cost model differs, so nothing learned under an older one carries over)."""
    return _profile_key(profile.fingerprint, profile.llama_build, _utc_sort_key(profile.created_at))


def model_key(path: str | os.PathLike[str]) -> str:
    """A model file's identity, as its inventory is cached: real path, size and mtime, so a
    file replaced under the same name starts fresh."""
    stat = os.stat(path)
    return f"{os.path.realpath(path)}|{stat.st_size}|{stat.st_mtime_ns}"


def _profile_key(fingerprint: str, llama_build: str, created_utc: str) -> str:
    return f"{fingerprint}|{llama_build}|{created_utc}"


# -- encoding and checking ---------------------------------------------------------------------


def _encode(profile: Profile) -> str:
    """The profile's JSON text, refused if it is over MAX_PROFILE_BYTES or lacks its keys."""
    for name in ("fingerprint", "llama_build", "created_at"):
        value = getattr(profile, name)
        if not isinstance(value, str) or not value:
            raise BadInputError(f"profile {name} must be a non-empty string, not {value!r}")
    if not isinstance(profile.mode, ProfileMode):
        raise BadInputError(f"profile mode must be one of {[m.value for m in ProfileMode]}")
    text = profile.to_json()
    size = len(text.encode())
    if size > MAX_PROFILE_BYTES:
        raise BadInputError(
            f"profile is {size / 1024:.0f} KB, over the {MAX_PROFILE_BYTES // 1024} KB limit"
        )
    return text


def _utc_sort_key(created_at: str) -> str:
    """created_at as fixed-width UTC ISO 8601, so text order is time order (naive means UTC)."""
    text = created_at[:-1] + "+00:00" if created_at.endswith(("Z", "z")) else created_at
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise BadInputError(f"profile created_at is not an ISO 8601 time: {created_at!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds")


def _summary(row: tuple[Any, ...]) -> ProfileSummary:
    row_id, fingerprint, llama_build, mode, created_at, described, text = row
    return ProfileSummary(
        row_id, fingerprint, llama_build, mode, created_at, bool(described), len(text.encode())
    )


def _required_keys() -> tuple[str, ...]:
    return tuple(
        f.name for f in fields(Profile) if f.default is MISSING and f.default_factory is MISSING
    )


def _read_profile_file(path: Path) -> Profile:
    """Parse and check a profile JSON file; BadInputError naming the file on any problem."""
    data = _load_json_object(path)
    missing = [key for key in _required_keys() if key not in data]
    if missing:
        raise BadInputError(f"{path} is not a profile: missing {', '.join(missing)}")
    version = data.get("schema_version", PROFILE_SCHEMA_VERSION)
    if not isinstance(version, int) or isinstance(version, bool):
        raise BadInputError(f"{path} has a schema_version that is not a number: {version!r}")
    if version > PROFILE_SCHEMA_VERSION:
        raise BadInputError(
            f"{path} is a version {version} profile; this ShardChat reads up to version "
            f"{PROFILE_SCHEMA_VERSION} (update ShardChat)"
        )
    try:
        return Profile.from_dict(data)
    except _PARSE_ERRORS as exc:
        raise BadInputError(f"{path} is not a valid profile: {one_line(exc)}") from exc


def _load_json_object(path: Path) -> dict[str, Any]:
    """The file's JSON object, read with a size cap so a huge file is refused, not slurped."""
    limit = 4 * MAX_PROFILE_BYTES  # leaves room for wider indentation than we write
    try:
        with path.open("rb") as file:
            raw = file.read(limit + 1)
    except OSError as exc:
        raise BadInputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(raw) > limit:
        raise BadInputError(f"{path} is too big for a profile (over {limit // 1024} KB)")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{path} is not JSON: not UTF-8 text") from exc
    except json.JSONDecodeError as exc:
        raise BadInputError(f"{path} is not JSON: {exc.msg} at line {exc.lineno}") from exc
    if not isinstance(data, dict):
        raise BadInputError(f"{path} holds a JSON {type(data).__name__}, not a profile object")
    return data
