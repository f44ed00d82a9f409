"""`shardchat models`: find models on Hugging Face, see how fast each runs here, get them.

    models search QUERY      GGUF repositories on the Hub (--kind, --sort, --max-params)
    models show REPO         each quant: size and predicted speed on this machine
    models pull REPO[:QUANT|:FILE]
                             download (resumable, verified), then add to the model list
    models list              the model list, and unfinished downloads
    models remove NAME       take a model off the list (--delete-file deletes it too)
    models import [PATH...]  list GGUFs where they are (--hf-cache, --lmstudio)
    models token             keep a Hugging Face token for gated repositories
    models folder [DIR]      where downloads go, and how much they take

This module holds the group and the actions on the model list here (list, remove,
import, folder); the actions that ask the Hub (search, show, pull, token) are in
app.cli.commands.models_hub_command. The Hub is `HF_ENDPOINT` (a mirror) or huggingface.co.
Nothing here loads a model.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from app.hub.hub_settings import models_dir, set_models_dir
from app.hub.local_caches import hf_cache_dir, lmstudio_dirs, model_files_in
from app.screen_text.units import format_bytes
from app.stores.hub_store import UNFINISHED, HubStore
from app.stores.model_library import ModelEntry, ModelLibrary
from engine.errors import BadInputError, ModelFileError
from engine.model.model_purpose import ModelPurpose, purpose_of_file
from engine.model.prompt_format import AUTO

log = logging.getLogger(__name__)


# -- list, remove ----------------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    with ModelLibrary() as library:
        entries = library.models()
    with HubStore() as store:
        pending = store.downloads(UNFINISHED)
    if args.json:
        print(json.dumps({
            "models": [_entry_dict(e) for e in entries],
            "downloads": [{"id": d.id, "repo_id": d.repo_id, "path": d.model_path,
                           "status": d.status, "done_bytes": d.bytes_on_disk(),
                           "total_bytes": d.total_bytes, "error": d.error} for d in pending],
        }, indent=1))  # fmt: skip
        return 0
    for entry in entries:
        flags = " ".join(f for f, on in (("default", entry.is_default), ("built-in", entry.builtin),
                                           ("missing", not entry.exists)) if on)  # fmt: skip
        if base := base_model_flag(entry):
            flags = f"{flags}; {base}" if flags else base
        shown = format_bytes(entry.file_bytes) if entry.file_bytes else "-"
        print(f"{entry.readable_name:44} {entry.kind_text:18} {shown:>10}  {entry.path}"
              + (f"  [{flags}]" if flags else ""))  # fmt: skip
    for d in pending:
        print(f"downloading {d.repo_id}/{d.model_path}: {d.status}, "
              f"{format_bytes(d.bytes_on_disk())} of {format_bytes(d.total_bytes)}"
              + (f" ({d.error})" if d.error else ""))  # fmt: skip
    return 0


def _entry_dict(entry: ModelEntry) -> dict[str, object]:
    purpose = entry_purpose(entry)
    return {
        "name": entry.readable_name, "path": str(entry.path), "kind": entry.kind_text,
        "file_bytes": entry.file_bytes, "default": entry.is_default, "builtin": entry.builtin,
        "exists": entry.exists,
        "mmproj_path": str(entry.mmproj_path) if entry.mmproj_path else None,
        "trained_as": purpose.purpose.value if purpose else None,
        "prompt_format": entry.prompt_format,
    }  # fmt: skip


def entry_purpose(entry: ModelEntry) -> ModelPurpose | None:
    """What a listed model was trained for (engine.model.model_purpose), read from its header;
    None for a missing or unreadable file (the list still shows it)."""
    if not entry.exists:
        return None
    try:
        return purpose_of_file(entry.path)
    except ModelFileError:
        return None


def base_model_flag(entry: ModelEntry) -> str:
    """ "base model: plain completion" for a base model on the automatic format ("base model"
    when its setting chose another), "" for any other model."""
    purpose = entry_purpose(entry)
    if purpose is None or not purpose.is_base:
        return ""
    return "base model: plain completion" if entry.prompt_format == AUTO else "base model"


def run_remove(args: argparse.Namespace) -> int:
    with ModelLibrary() as library:
        entry = _find_entry(library, args.name)
        removed = library.remove(entry.path, delete_file=args.delete_file)
    said = " and deleted its file" if removed.file_deleted else " (the file stays on disk)"
    print(f"shardchat: removed {entry.readable_name}{said}", file=sys.stderr)
    return 0


def _find_entry(library: ModelLibrary, name: str) -> ModelEntry:
    entries = [e for e in library.models() if not e.builtin]
    wanted = name.lower()
    for match in (
        lambda e: str(e.path) == str(Path(name).expanduser().resolve()),
        lambda e: e.path.name.lower() in (wanted, wanted + ".gguf"),
        lambda e: e.readable_name.lower() == wanted or e.name.lower() == wanted,
    ):
        found = [e for e in entries if match(e)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise BadInputError(f"{name!r} names {len(found)} models; give the path")
    raise BadInputError(f"no model {name!r} in the model list (see: shardchat models list)")


def run_import(args: argparse.Namespace) -> int:
    folders = [Path(p).expanduser() for p in args.paths]
    folders += [hf_cache_dir()] if args.hf_cache else []
    folders += lmstudio_dirs() if args.lmstudio else []
    if not folders:
        raise BadInputError("name GGUF files or folders, or --hf-cache / --lmstudio")
    files: list[Path] = []
    for place in folders:
        if not place.exists():
            raise BadInputError(f"{place}: no such file or folder")
        files += model_files_in(place) if place.is_dir() else [place]
    added, refused = 0, 0
    with ModelLibrary() as library:
        for path in files:
            try:
                entry = library.add(path)
            except BadInputError as exc:
                refused += 1
                print(f"shardchat: refused {exc}", file=sys.stderr)
                continue
            except Exception as exc:  # one file's surprise must not cost the others
                log.exception("importing %s failed", path)
                refused += 1
                print(f"shardchat: refused {path}: unexpected {type(exc).__name__}: {exc} "
                      "(details in the log)", file=sys.stderr)  # fmt: skip
                continue
            added += 1
            print(entry.path)
    summary = f"{added} model(s) in the list from {len(files)} file(s)"
    print(f"shardchat: {summary}" + (f", {refused} refused" if refused else ""), file=sys.stderr)
    return 2 if refused else 0


# -- folder ---------------------------------------------------------------------------------------


def run_folder(args: argparse.Namespace) -> int:
    folder = set_models_dir(Path(args.dir)) if args.dir else models_dir()
    used = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0
    print(f"{folder}  ({format_bytes(used)} of models)")
    return 0
