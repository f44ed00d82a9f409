"""The user's list of models: which GGUF files ShardChat knows, their projectors, the default.

Why a list at all: people keep models in many folders (a download folder, a
big external disk) and expect, as in LM Studio or Jan, to import a file once
and pick it again later. The list only points at files; it never copies
them, and removing an entry leaves the file on disk unless the caller asks.

Why SQLite: like `app.stores.chat_store` and `app.stores.profile_store`, each change is one
short transaction in `models.sqlite3` in the data folder, upgraded in place by
numbered migrations, and a damaged or foreign file is moved aside, never
written to or deleted (see `app.stores.sqlite_file`).

The embedded default model is always listed first as a built-in entry. It is
not stored (its path moves with the Python environment) and cannot be
removed; it is the default whenever no stored entry is, and `default()` falls
back to it when the chosen file has gone missing. A stored model whose file
vanished stays listed, marked missing, so a model on an unplugged disk comes
back when the disk does.

Files are checked with `engine.model.inventory.read_inventory` before they are
listed, so anything that is not a usable GGUF is refused with its reason in
one line and the list is left as it was.

Threads: one SQLite connection, used only from the thread that made the
library (the GUI thread in the app).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from app.paths import app_paths
from app.stores.model_files import (
    builtin_model_path,
    check_loadable,
    check_projector,
    delete_model_file,
    display_name,
    file_bytes,
    kind_label,
    lone_projector_beside,
    resolved,
)
from app.stores.sqlite_file import StoreIdentity
from app.stores.store_base import SqliteStore, StoreSchema
from engine.errors import BadInputError, ModelFileError
from engine.model.inventory import read_inventory
from engine.model.model_naming import readable_model_name
from engine.model.prompt_format import AUTO, check_format_name

log = logging.getLogger(__name__)

STORE_FILE_NAME = "models.sqlite3"
APPLICATION_ID = 0x53684D64  # "ShMd": ShardChat's model list (chats "ShCt", profiles "ShCh")
MIGRATIONS_TABLE = "_migrations"

# A list written before m002 lacks prompt_format until it is migrated, so it is not required.
_REQUIRED = ("id", "path", "mmproj_path", "name", "architecture", "kind", "added_at", "is_default")
_COLUMNS = (*_REQUIRED, "prompt_format")
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM models"
_IDENTITY = StoreIdentity("model list", APPLICATION_ID, (("models", _REQUIRED),), MIGRATIONS_TABLE)


def m001_models(conn: sqlite3.Connection) -> None:
    """The models table; a partial unique index allows at most one stored default."""
    conn.execute(
        "CREATE TABLE models ("
        " id INTEGER PRIMARY KEY,"
        " path TEXT NOT NULL UNIQUE,"
        " mmproj_path TEXT,"
        " name TEXT NOT NULL,"
        " architecture TEXT NOT NULL,"
        " kind TEXT NOT NULL,"
        " added_at TEXT NOT NULL,"
        " is_default INTEGER NOT NULL DEFAULT 0)"
    )
    conn.execute("CREATE UNIQUE INDEX one_default ON models (is_default) WHERE is_default = 1")
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")


def m002_prompt_format(conn: sqlite3.Connection) -> None:
    """Each model's prompt-format setting (engine.model.prompt_format): auto unless chosen."""
    conn.execute(f"ALTER TABLE models ADD COLUMN prompt_format TEXT NOT NULL DEFAULT '{AUTO}'")
    conn.execute("PRAGMA user_version = 2")


MIGRATIONS = (m001_models, m002_prompt_format)
_SCHEMA = StoreSchema(STORE_FILE_NAME, _IDENTITY, MIGRATIONS, probes=(_SELECT,))


@dataclass(frozen=True)
class ModelEntry:
    """One listed model as it stands now (`exists` and sizes are read when listed)."""

    path: Path  # absolute and normalised (links kept: see resolved)
    name: str  # the file's name without .gguf: what people recognise
    architecture: str
    kind: str  # "dense", "MoE 128×8" (kind_label)
    mmproj_path: Path | None
    is_default: bool  # the user's choice (the built-in when none is stored)
    builtin: bool
    exists: bool
    mmproj_exists: bool  # False when none is paired or its file is gone
    file_bytes: int | None  # None when the file is missing
    added_at: str | None  # UTC ISO 8601; None for the built-in
    prompt_format: str = AUTO  # its prompt-format setting (the built-in's is always auto)

    @property
    def readable_name(self) -> str:
        """The name to show people ("SmolLM2 135M Instruct · Q4_1"), made from the file name;
        `name` stays the file's own, for where the file itself is meant."""
        return readable_model_name(self.path)

    @property
    def kind_text(self) -> str:
        """The kind, with "+ vision" once a projector is paired."""
        return f"{self.kind} + vision" if self.mmproj_path is not None else self.kind


@dataclass(frozen=True)
class ModelRemoved:
    """What a removal did: the entry that left the list, and what else changed with it."""

    entry: ModelEntry
    file_deleted: bool
    default_reset: bool  # the removed entry was the default; the built-in is now


def default_store_path() -> Path:
    """Where the model list lives: the app's data folder (honours SHARDCHAT_HOME)."""
    return app_paths().data_dir / STORE_FILE_NAME


class ModelLibrary(SqliteStore):
    """The model list in one SQLite file; connects in __init__, use as a context manager."""

    schema = _SCHEMA

    def __init__(self, path: Path | None = None) -> None:
        self._builtin_path, self._builtin_problem = builtin_model_path()
        self._builtin_facts: tuple[str, str] | None = None  # (architecture, kind), read once
        super().__init__(path)

    # -- reading -------------------------------------------------------------------------------

    def models(self) -> list[ModelEntry]:
        """The built-in model first (when installed), then stored ones in the order added."""
        stored = self._stored()
        if self._builtin_path is None:
            return stored
        has_default = any(entry.is_default for entry in stored)
        return [self._builtin_entry(is_default=not has_default), *stored]

    def find(self, path: str | os.PathLike[str]) -> ModelEntry | None:
        """The listed entry for this file (any spelling of its path, links followed), or None."""
        wanted = resolved(path)
        return _matching(self.models(), wanted)

    def projector_of(self, path: str | os.PathLike[str]) -> Path | None:
        """The projector paired with this listed model, if its file exists. Unlike find(),
        it never reads the built-in model's header (it has no projector): the window asks
        this before its model starts loading."""
        entry = _matching(self._stored(), resolved(path))
        if entry is None or not entry.mmproj_exists:
            return None
        return entry.mmproj_path

    def default_path(self) -> Path:
        """The model to load when none is named: the user's choice while its file exists,
        else the built-in. Read from the stored rows alone: the built-in model's header
        (75 ms) is not read on the way to the window's first load."""
        chosen = next((entry for entry in self._stored() if entry.is_default), None)
        if chosen is not None and chosen.exists:
            return chosen.path
        if self._builtin_path is not None:
            if chosen is not None:
                log.warning("default model %s is missing; using the built-in", chosen.path)
            return self._builtin_path
        if chosen is not None:
            raise ModelFileError(
                f"the default model {chosen.path} is missing and the built-in model is not "
                "installed"
            )
        raise ModelFileError(f"no model to load: {self._builtin_problem}")

    def default(self) -> ModelEntry:
        """default_path()'s entry in the list."""
        path = self.default_path()
        return next(entry for entry in self.models() if entry.path == path)

    # -- changing ------------------------------------------------------------------------------

    def add(self, path: str | os.PathLike[str]) -> ModelEntry:
        """List a GGUF model (an already listed one is returned as it is).

        Anything but a usable GGUF model is refused with its reason; a lone
        vision projector in the model's folder is paired with it, as LM Studio does.
        """
        model_path = resolved(path)
        existing = self.find(model_path)
        if existing is not None:
            return existing
        inventory = read_inventory(model_path)
        if inventory.is_vision_projector:
            raise BadInputError(
                f"{model_path.name} is a vision projector (mmproj); pair it with its model instead"
            )
        check_loadable(model_path)
        projector = lone_projector_beside(model_path)
        with self._transaction():
            self._conn.execute(
                "INSERT INTO models (path, mmproj_path, name, architecture, kind, added_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    str(model_path),
                    None if projector is None else str(projector),
                    display_name(model_path),
                    inventory.architecture,
                    kind_label(inventory),
                    datetime.now(timezone.utc).isoformat(timespec="seconds"),
                ),
            )
        log.info("added model %s (projector %s)", model_path, projector)
        return self._require(model_path)

    def pair_projector(
        self, model_path: str | os.PathLike[str], mmproj_path: str | os.PathLike[str]
    ) -> ModelEntry:
        """Give a listed model its vision projector, once the file is checked to be one."""
        entry = self._require_stored(model_path, "takes no vision projector")
        projector = resolved(mmproj_path)
        check_projector(projector)
        self._set_projector(entry.path, projector)
        return self._require(entry.path)

    def unpair_projector(self, model_path: str | os.PathLike[str]) -> ModelEntry:
        """Forget a model's vision projector (the projector file stays on disk)."""
        entry = self._require_stored(model_path, "has no vision projector")
        self._set_projector(entry.path, None)
        return self._require(entry.path)

    def set_prompt_format(self, model_path: str | os.PathLike[str], name: str) -> ModelEntry:
        """Choose how a listed model's prompts are written: auto, template, completion or a
        llama.cpp built-in format; used from its next load (or switched on the loaded one)."""
        entry = self._require_stored(model_path, "always uses its own chat template")
        check_format_name(name)
        with self._transaction():
            self._conn.execute(
                "UPDATE models SET prompt_format = ? WHERE path = ?", (name, str(entry.path))
            )
        log.info("prompt format of %s is now %s", entry.path, name)
        return self._require(entry.path)

    def set_default(self, path: str | os.PathLike[str]) -> ModelEntry:
        """Make a listed model the default; the built-in one clears the stored choice."""
        entry = self._require(path)
        if not entry.exists:
            raise BadInputError(f"{entry.path} is missing, so it cannot be the default")
        with self._transaction():
            self._conn.execute("UPDATE models SET is_default = 0 WHERE is_default = 1")
            if not entry.builtin:
                self._conn.execute(
                    "UPDATE models SET is_default = 1 WHERE path = ?", (str(entry.path),)
                )
        log.info("default model is now %s", entry.path)
        return self._require(entry.path)

    def remove(self, path: str | os.PathLike[str], delete_file: bool = False) -> ModelRemoved:
        """Take a model off the list; its file is deleted only when `delete_file` says so.

        Row and file go together: if the file cannot be deleted the row stays too.
        """
        entry = self._require_stored(path, "cannot be removed")
        with self._transaction():
            self._conn.execute("DELETE FROM models WHERE path = ?", (str(entry.path),))
            file_deleted = delete_file and delete_model_file(entry.path)
        log.info("removed model %s (file deleted: %s)", entry.path, file_deleted)
        return ModelRemoved(entry, file_deleted, default_reset=entry.is_default)

    # -- inside --------------------------------------------------------------------------------

    def _require(self, path: str | os.PathLike[str]) -> ModelEntry:
        entry = self.find(path)
        if entry is None:
            raise BadInputError(f"{resolved(path)} is not in the model list")
        return entry

    def _require_stored(self, path: str | os.PathLike[str], builtin_refusal: str) -> ModelEntry:
        entry = self._require(path)
        if entry.builtin:
            raise BadInputError(f"the built-in model {builtin_refusal}")
        return entry

    def _set_projector(self, model_path: Path, projector: Path | None) -> None:
        with self._transaction():
            self._conn.execute(
                "UPDATE models SET mmproj_path = ? WHERE path = ?",
                (None if projector is None else str(projector), str(model_path)),
            )
        log.info("projector of %s is now %s", model_path, projector)

    def _stored(self) -> list[ModelEntry]:
        rows = self._conn.execute(_SELECT + " ORDER BY id").fetchall()
        return [_entry_from_row(row) for row in rows]

    def _builtin_entry(self, is_default: bool) -> ModelEntry:
        path = self._builtin_path
        assert path is not None
        architecture, kind = self._read_builtin_facts(path)
        return ModelEntry(
            path=path,
            name=display_name(path),
            architecture=architecture,
            kind=kind,
            mmproj_path=None,
            is_default=is_default,
            builtin=True,
            exists=path.is_file(),
            mmproj_exists=False,
            file_bytes=file_bytes(path),
            added_at=None,
        )

    def _read_builtin_facts(self, path: Path) -> tuple[str, str]:
        """Architecture and kind of the built-in file, read once per library (it is not stored)."""
        if self._builtin_facts is None:
            try:
                inventory = read_inventory(path)
                self._builtin_facts = (inventory.architecture, kind_label(inventory))
            except ModelFileError as exc:
                log.warning("cannot read the built-in model: %s", exc)
                self._builtin_facts = ("unknown", "unreadable")
        return self._builtin_facts


# -- files -------------------------------------------------------------------------------------


def projector_for(model_path: Path) -> Path | None:
    """The projector paired with this model in the library, else the lone one beside it."""
    with ModelLibrary() as library:
        entry = library.find(model_path)
    if entry is not None and entry.mmproj_exists and entry.mmproj_path is not None:
        return entry.mmproj_path
    return lone_projector_beside(resolved(model_path))


def prompt_format_for(model_path: str | os.PathLike[str], requested: str | None = None) -> str:
    """`requested` when given (a --prompt-format, a load's own), else the prompt-format
    setting stored for this model; auto when it is not listed."""
    if requested is not None:
        return requested
    with ModelLibrary() as library:
        entry = library.find(model_path)
    return entry.prompt_format if entry is not None else AUTO


def _matching(entries: list[ModelEntry], wanted: Path) -> ModelEntry | None:
    """The entry of this path as written, else of the same file (links followed)."""
    exact = next((entry for entry in entries if entry.path == wanted), None)
    if exact is not None:
        return exact
    real = wanted.resolve()
    return next((entry for entry in entries if entry.path.resolve() == real), None)


def _entry_from_row(row: tuple[Any, ...]) -> ModelEntry:
    _id, path_text, mmproj_text, name, architecture, kind, added_at, is_default, fmt = row
    path = Path(path_text)
    mmproj = None if mmproj_text is None else Path(mmproj_text)
    return ModelEntry(
        path=path,
        name=name,
        architecture=architecture,
        kind=kind,
        mmproj_path=mmproj,
        is_default=bool(is_default),
        builtin=False,
        exists=path.is_file(),
        mmproj_exists=mmproj is not None and mmproj.is_file(),
        file_bytes=file_bytes(path),
        added_at=added_at,
        prompt_format=fmt,
    )
