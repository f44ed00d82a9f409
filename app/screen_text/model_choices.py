"""The models the chat window's picker offers, as plain values the widget only has to draw.

Why a separate list from the model library's: the picker offers what can be
loaded right now, in a few words each ("SmolLM2 135M Instruct · Q4_1 · 96.3 MiB"),
so missing files are left out, sizes count every part of a split model, and a
projector counts only while its file is there. Reading it all here keeps the
widget free of file checks and testable with plain entries.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.screen_text.units import format_bytes
from app.stores.model_files import is_projector_name
from app.stores.model_library import ModelEntry, ModelLibrary
from engine.model.model_naming import SEPARATOR, readable_model_name, split_parts

SEES_IMAGES = "sees images"


@dataclass(frozen=True)
class PickerEntry:
    """One model the picker offers; `mmproj` is the projector to load with it, if any."""

    path: str
    name: str  # the readable name (engine.model.model_naming)
    size_bytes: int  # every part of a split model together
    sees_images: bool
    is_default: bool  # the model loaded when none is named
    mmproj: str | None

    @property
    def label(self) -> str:
        """What its item says: "Name · 1.2 GiB · sees images"."""
        parts = [self.name, format_bytes(self.size_bytes)]
        if self.sees_images:
            parts.append(SEES_IMAGES)
        return SEPARATOR.join(parts)


def picker_entries(
    library: ModelLibrary, default_model: str | os.PathLike[str]
) -> list[PickerEntry]:
    """The listed models whose files exist, in the library's order (the built-in first), with
    `default_model` (the embedded model's path) first when the library does not list it;
    each file once, however its path is spelt."""
    entries: list[PickerEntry] = []
    seen: set[Path] = set()
    listed = [entry for entry in library.models() if entry.exists]
    default_path = Path(default_model).expanduser().resolve()
    if default_path.is_file() and all(entry.path.resolve() != default_path for entry in listed):
        has_default = any(entry.is_default for entry in listed)
        entries.append(_unlisted_entry(default_path, is_default=not has_default))
        seen.add(default_path)
    for entry in listed:
        real = entry.path.resolve()  # a link (the Hugging Face cache's) is the file it names
        if real in seen or is_projector_name(entry.path):
            continue
        seen.add(real)
        entries.append(_listed_entry(entry))
    return entries


def model_bytes(path: Path) -> int:
    """The file's size, or the sum of every part present when it is one part of a split model."""
    total = 0
    for part in split_parts(path):
        try:
            total += part.stat().st_size
        except OSError:
            continue  # a part not there (yet) adds nothing
    return total


def _listed_entry(entry: ModelEntry) -> PickerEntry:
    sees = entry.mmproj_exists and entry.mmproj_path is not None
    return PickerEntry(
        path=str(entry.path),
        name=entry.readable_name,
        size_bytes=model_bytes(entry.path),
        sees_images=sees,
        is_default=entry.is_default,
        mmproj=str(entry.mmproj_path) if sees else None,
    )


def _unlisted_entry(path: Path, is_default: bool) -> PickerEntry:
    return PickerEntry(
        path=str(path),
        name=readable_model_name(path),
        size_bytes=model_bytes(path),
        sees_images=False,
        is_default=is_default,
        mmproj=None,
    )
