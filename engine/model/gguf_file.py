"""Opening a GGUF file safely, without loading its weights.

Every entry point that takes a model path (CLI, worker, inventory) goes through
`check_model_path` / `open_gguf`, so a missing, empty, foreign or truncated
file is refused with one clear sentence before llama.cpp ever sees it.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import gguf

from engine.errors import ModelFileError

GGUF_MAGIC = b"GGUF"
_GC_LOCK = threading.Lock()  # one parse at a time decides when collection resumes


def check_model_path(path: str | os.PathLike[str]) -> Path:
    """Return the path if it names a readable, non-empty file starting with the GGUF magic."""
    model_path = Path(path).expanduser()
    if not model_path.exists():
        raise ModelFileError(f"{model_path}: no such file")
    if model_path.is_dir():
        raise ModelFileError(f"{model_path}: is a directory, not a GGUF model file")
    if not os.access(model_path, os.R_OK):
        raise ModelFileError(f"{model_path}: permission denied (cannot read the file)")
    try:
        with model_path.open("rb") as handle:
            magic = handle.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise ModelFileError(f"{model_path}: cannot read: {exc.strerror or exc}") from exc
    if not magic:
        raise ModelFileError(f"{model_path}: file is empty (0 bytes)")
    if magic != GGUF_MAGIC:
        raise ModelFileError(f"{model_path}: not a GGUF file (wrong magic bytes)")
    return model_path


def open_gguf(path: str | os.PathLike[str]) -> gguf.GGUFReader:
    """Memory-map the GGUF header and tensor table; refuse truncated or malformed files."""
    model_path = check_model_path(path)
    try:
        reader = gguf.GGUFReader(model_path, "r")
    except (ValueError, IndexError, KeyError, OSError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{model_path}: malformed or truncated GGUF ({exc})") from exc
    file_bytes = model_path.stat().st_size
    data_end = max((t.data_offset + t.n_bytes for t in reader.tensors), default=0)
    if data_end > file_bytes:
        raise ModelFileError(
            f"{model_path}: truncated GGUF (tensor data needs {data_end} bytes, file has "
            f"{file_bytes})"
        )
    return reader


@contextlib.contextmanager
def without_cyclic_gc() -> Iterator[None]:
    """Pause the cycle collector while a GGUFReader is alive (wrap open and use, then drop it).

    GGUFReader builds hundreds of thousands of small numpy objects for a
    tokenizer; each full collection while they live walks them all with the GIL
    held, which froze the GUI thread for 100+ ms while the worker read a model.
    Reference counting still frees everything; collection resumes afterwards.
    """
    with _GC_LOCK:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if was_enabled:
                gc.enable()


def field_value(reader: gguf.GGUFReader, key: str, default: object = None) -> object:
    """The decoded value of a metadata key, or `default` when the key is absent."""
    field = reader.get_field(key)
    return default if field is None else field.contents()
