"""GGUF models other tools already downloaded, to list in place instead of fetching again.

People who come from LM Studio or used `hf download` have tens of GB of
models on disk already. The model list only points at files, so those can be
listed where they are: the Hugging Face cache's snapshots (its files are links
into `blobs/`, resolved so the list names the real file) and LM Studio's models
folders. Only a model's first file is listed (split parts and vision projectors
are found from it: `ModelLibrary.add` pairs a lone projector beside it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from huggingface_hub import constants

from app.hub.gguf_files import is_projector

_LATER_PART = re.compile(r"-(\d{5})-of-\d{5}\.gguf$", re.IGNORECASE)


def hf_cache_dir() -> Path:
    """huggingface_hub's cache (HF_HUB_CACHE / HF_HOME honoured, as its own tools do)."""
    return Path(os.environ.get("HF_HUB_CACHE", constants.HF_HUB_CACHE)).expanduser()


def lmstudio_dirs() -> list[Path]:
    """LM Studio's models folders, newer layout first; only those that exist."""
    home = Path.home()
    candidates = [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]
    return [folder for folder in candidates if folder.is_dir()]


def model_files_in(folder: Path) -> list[Path]:
    """The GGUF models under `folder` to list: first parts only, no projectors, each once."""
    seen: set[Path] = set()
    found = []
    for path in sorted(_ggufs_under(folder)):
        real = path.resolve()
        if real in seen or is_projector(path.name) or _is_later_part(path.name):
            continue
        seen.add(real)
        found.append(path)
    return found


def _ggufs_under(folder: Path) -> Iterator[Path]:
    for root, _dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            if name.lower().endswith(".gguf"):
                yield Path(root) / name


def _is_later_part(name: str) -> bool:
    match = _LATER_PART.search(name)
    return match is not None and int(match.group(1)) > 1
