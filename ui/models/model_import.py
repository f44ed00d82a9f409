"""Importing GGUF files into the model list: checked on the reader's thread, then listed by
the library on the GUI thread, with one line said per file.

Each file (and a lone projector beside a model) is read once on the worker, so
the library's own check on the GUI thread finds it in
`engine.model.inventory.read_inventory`'s cache (16 files; a bigger drop reads
the oldest again), and its readings join the details pane's cache, so the
imported model's details show at once. The library stays on the GUI thread: its
SQLite connection belongs to the thread that opened it. A refused file gets its
one-line reason; the others are imported anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

from app.screen_text.model_summary import summarize
from app.stores.model_files import check_loadable, is_projector_name, lone_projector_beside
from app.stores.model_library import ModelEntry, ModelLibrary
from engine.errors import BadInputError
from ui.models.model_details import FileKey, InventoryReader, Reading, file_key

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass
class ImportOutcome:
    """What an import did: the entries listed, a line per file, and the refusals."""

    added: list[ModelEntry] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def message(self) -> str:
        return "\n".join(self.problems + self.lines)


def check_files(paths: list[Path], read_inventory: InventoryReader) -> dict[FileKey, Reading]:
    """On the reader's thread: read each file once (and check a model as llama.cpp reads it,
    in a child process); the readings of those that passed."""
    readings: dict[FileKey, Reading] = {}
    for path in paths:
        resolved = path.expanduser().resolve()
        key = file_key(resolved)
        try:
            reading: Reading = summarize(read_inventory(resolved))
            if not is_projector_name(resolved):
                check_loadable(resolved)
                lone_projector_beside(resolved)
        except BadInputError:
            continue  # the library refuses it again on the GUI thread, with the reason
        except Exception:  # likewise: the import must still finish
            log.exception("checking %s failed", path)
            continue
        if key is not None:
            readings[key] = reading
    return readings


def import_checked(library: ModelLibrary, paths: list[Path]) -> ImportOutcome:
    """On the GUI thread, once the files were read: list them; a projector dropped with a
    single model is paired to it."""
    outcome = ImportOutcome()
    projectors = [p for p in paths if is_projector_name(p)]
    for path in (p for p in paths if p not in projectors):
        entry = _import_one(library, path, outcome)
        if entry is not None:
            outcome.added.append(entry)
    if len(outcome.added) == 1 and len(projectors) == 1:
        _pair_dropped(library, outcome.added[0], projectors[0], outcome)
    else:
        for path in projectors:  # refused by the library, with the reason
            attempt(partial(library.add, path), outcome.problems)
    return outcome


def attempt(change: Callable[[], T], problems: list[str]) -> T | None:
    """A library change, or None with its refusal noted in `problems`."""
    try:
        return change()
    except BadInputError as exc:
        problems.append(str(exc))
        return None


def _import_one(library: ModelLibrary, path: Path, outcome: ImportOutcome) -> ModelEntry | None:
    known = library.find(path)
    entry = attempt(partial(library.add, path), outcome.problems)
    if entry is not None:
        note = "is already in the list" if known is not None else "imported"
        outcome.lines.append(f"{entry.name} {note}{_paired_note(entry) if known is None else ''}")
    return entry


def _pair_dropped(
    library: ModelLibrary, model: ModelEntry, projector: Path, outcome: ImportOutcome
) -> None:
    """Pair a projector dropped together with one model (unless import already did)."""
    if model.mmproj_path == projector.resolve():
        return
    if (
        attempt(partial(library.pair_projector, model.path, projector), outcome.problems)
        is not None
    ):
        outcome.lines.append(f"Paired {projector.name} with {model.name}")


def _paired_note(entry: ModelEntry) -> str:
    if entry.mmproj_path is None:
        return ""
    return f", paired with {entry.mmproj_path.name}"
