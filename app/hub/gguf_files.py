"""A repository's GGUF files as the models people pick: one entry per quant.

Publishers lay out GGUF repositories in a few ways, and a catalogue must read
them all: one file per quant ("Qwen3-8B-Q4_K_M.gguf"), a big quant split into
parts ("…-Q8_0-00001-of-00003.gguf", sometimes in a folder named for the
quant), and vision projectors beside the models ("mmproj-F16.gguf",
"mmproj-model-Q8_0.gguf"). Here a split model is one entry with its parts in
order, and each model is paired with one projector: the one in its own
precision when there is one, else F16 (what llama.cpp's converters write by
default), else the first. Nothing here touches the network.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from engine.model.model_naming import quant_in_name

GGUF_SUFFIX = ".gguf"
PROJECTOR_MARK = "mmproj"
_SPLIT = re.compile(r"^(?P<head>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_PROJECTOR_FALLBACK = ("F16", "BF16", "F32")


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repository, as its tree lists it."""

    path: str  # within the repository, with forward slashes
    size: int
    sha256: str | None  # the LFS hash; None for a plain git file

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name


@dataclass(frozen=True)
class RemoteModel:
    """One quant of a model: its file, or its parts in order, and the projector it takes."""

    parts: tuple[RemoteFile, ...]
    quant: str | None
    projector: RemoteFile | None = None
    missing_parts: int = 0  # a split model with parts absent from the tree cannot be used

    @property
    def path(self) -> str:
        """The first part: what a person names when they pull this quant."""
        return self.parts[0].path

    @property
    def size(self) -> int:
        return sum(part.size for part in self.parts)

    @property
    def download_size(self) -> int:
        """Everything a pull fetches: the parts and the paired projector."""
        return self.size + (self.projector.size if self.projector else 0)

    @property
    def is_split(self) -> bool:
        return len(self.parts) > 1


def is_gguf(path: str) -> bool:
    return path.lower().endswith(GGUF_SUFFIX)


def is_projector(path: str) -> bool:
    return is_gguf(path) and PROJECTOR_MARK in PurePosixPath(path).name.lower()


def group_models(files: Iterable[RemoteFile]) -> list[RemoteModel]:
    """The repository's models, largest quant last (the order people compare them in)."""
    ggufs = [f for f in files if is_gguf(f.path)]
    projectors = [f for f in ggufs if is_projector(f.path)]
    singles: list[RemoteModel] = []
    splits: dict[tuple[str, int], dict[int, RemoteFile]] = defaultdict(dict)
    for file in ggufs:
        if is_projector(file.path):
            continue
        match = _SPLIT.match(file.path)
        if match is None:
            singles.append(RemoteModel((file,), quant_in_name(file.name)))
            continue
        splits[(match.group("head"), int(match.group("count")))][int(match.group("part"))] = file
    models = singles + [_split_model(parts, count) for (_head, count), parts in splits.items()]
    paired = [_with_projector(model, projectors) for model in models]
    return sorted(paired, key=lambda m: (m.size, m.path))


def choose_model(models: Sequence[RemoteModel], wanted: str) -> RemoteModel | None:
    """The model a person named: by a file's path or name, or by its quant ("Q4_K_M")."""
    lowered = wanted.lower()
    for model in models:
        names = {p.path.lower() for p in model.parts} | {p.name.lower() for p in model.parts}
        if lowered in names:
            return model
    return next((m for m in models if m.quant and m.quant.lower() == lowered), None)


def _split_model(parts: dict[int, RemoteFile], count: int) -> RemoteModel:
    ordered = tuple(parts[index] for index in sorted(parts))
    return RemoteModel(ordered, quant_in_name(ordered[0].name), missing_parts=count - len(parts))


def _with_projector(model: RemoteModel, projectors: Sequence[RemoteFile]) -> RemoteModel:
    if not projectors:
        return model
    folder = PurePosixPath(model.path).parent
    nearby = [p for p in projectors if PurePosixPath(p.path).parent == folder] or list(projectors)
    by_quant = {(quant_in_name(p.name) or "").upper(): p for p in nearby}
    for quant in (model.quant or "", *_PROJECTOR_FALLBACK):
        if quant.upper() in by_quant:
            return _paired(model, by_quant[quant.upper()])
    return _paired(model, sorted(nearby, key=lambda p: p.path)[0])


def _paired(model: RemoteModel, projector: RemoteFile) -> RemoteModel:
    return RemoteModel(model.parts, model.quant, projector, model.missing_parts)
