"""What ShardChat reads from model files on disk before it lists them: projector names and
pairing, the checks a file must pass, and how a file is named and sized in the list.

Apart from the model list's store (app.stores.model_library), because these are rules
about files, not about the list: the import dialog and the model choices apply them to
files that are not listed yet, and none of them touches SQLite.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from engine.errors import BadInputError, ModelFileError
from engine.model.default_model import default_model_path
from engine.model.inventory import ModelInventory, read_inventory

log = logging.getLogger(__name__)

PROJECTOR_MARK = "mmproj"  # a file whose name holds this is taken for a vision projector
GGUF_SUFFIX = ".gguf"


def check_loadable(path: Path) -> None:
    """Refuse a model file that would abort llama.cpp when loaded: asked once per file
    version in a child process (engine.llama.file_check), so the app never dies of it."""
    from engine.llama.file_check import check_loads_in_child  # llama.cpp only when importing

    check_loads_in_child(path)


def is_projector_name(path: Path) -> bool:
    """A .gguf whose name says mmproj: how projectors are published next to their models."""
    name = path.name.lower()
    return name.endswith(GGUF_SUFFIX) and PROJECTOR_MARK in name


def lone_projector_beside(model_path: Path) -> Path | None:
    """The one vision projector in the model's folder, if there is exactly one and it checks out."""
    try:
        candidates = [
            p for p in model_path.parent.iterdir()
            if p != model_path and is_projector_name(p) and p.is_file()
        ]  # fmt: skip
    except OSError:
        return None
    if len(candidates) != 1:
        return None
    try:
        check_projector(resolved(candidates[0]))
    except BadInputError as exc:
        log.info("not pairing %s automatically: %s", candidates[0], exc)
        return None
    return resolved(candidates[0])


def check_projector(path: Path) -> None:
    """Refuse, with the reason, a file that is not a GGUF vision projector."""
    inventory = read_inventory(path)
    if not inventory.is_vision_projector:
        raise BadInputError(
            f"{path.name} is not a vision projector (it is a {inventory.architecture} model); "
            "choose an mmproj file"
        )


def delete_model_file(path: Path) -> bool:
    """Delete the file; False if it was already gone. A refusal is one line for the user."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise BadInputError(f"cannot delete {path}: {exc.strerror or exc}") from exc
    return True


def builtin_model_path() -> tuple[Path | None, str]:
    """The embedded model's path, or None and why not (the package may not be installed)."""
    try:
        return default_model_path().resolve(), ""
    except ModelFileError as exc:
        log.warning("no built-in model: %s", exc)
        return None, str(exc)


def resolved(path: str | os.PathLike[str]) -> Path:
    """Absolute and normalised, links kept: a model in the Hugging Face cache is a link
    into its blobs/ folder, and only the link's name says what it is (and where its
    split parts and projector lie)."""
    return Path(os.path.abspath(Path(path).expanduser()))


def display_name(path: Path) -> str:
    return path.name[: -len(GGUF_SUFFIX)] if path.name.lower().endswith(GGUF_SUFFIX) else path.name


def file_bytes(path: Path) -> int | None:
    try:
        return path.stat().st_size if path.is_file() else None
    except OSError:
        return None


def kind_label(inventory: ModelInventory) -> str:
    """Dense, "MoE 128×8" (experts × used per token, "+1 shared") or "vision projector"."""
    if inventory.is_vision_projector:
        kind = inventory.projector_type
        return f"vision projector ({kind})" if kind else "vision projector"
    if not inventory.is_moe:
        return "dense"
    label = f"MoE {inventory.expert_count}×{inventory.expert_used_count}"
    if inventory.expert_shared_count:
        label += f" +{inventory.expert_shared_count} shared"
    return label
