"""Writing a file so that readers see the old version or the new one, never half of it.

The text goes to a temp file in the same folder (same file system, so the
rename is atomic), is flushed to disk, and replaces the target with
os.replace. A crash leaves at most a `.NAME.*.tmp` file beside it, which
`remove_leftovers` clears on the next run.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from engine.errors import BadInputError

TEMP_SUFFIX = ".tmp"


def write_text_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """Write `text` (UTF-8, LF) to `path` atomically; BadInputError with the reason if it fails.

    The file is private (0600, as the temp file is made) unless `mode` is given."""
    try:
        fd, temp_name = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX
        )
    except OSError as exc:
        raise BadInputError(f"cannot write {path}: {exc.strerror or exc}") from exc
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as file:
            if mode is not None:
                os.fchmod(file.fileno(), mode)
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise BadInputError(f"cannot write {path}: {exc.strerror or exc}") from exc
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def remove_leftovers(folder: Path) -> int:
    """Delete temp files a killed writer left anywhere under `folder`; returns how many."""
    removed = 0
    for leftover in folder.rglob(f".*{TEMP_SUFFIX}"):
        if leftover.is_file():
            leftover.unlink(missing_ok=True)
            removed += 1
    return removed
