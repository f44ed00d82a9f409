"""Bad model paths are refused with one clear sentence before llama.cpp sees them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.errors import ModelFileError
from engine.model.gguf_file import check_model_path, open_gguf
from engine.model.inventory import read_inventory


def unreadable_file(tmp_path: Path) -> Path:
    """A file this process cannot read: mode 000, or for root (who ignores modes) /proc/self/mem."""
    if os.geteuid() == 0:
        return Path("/proc/self/mem")
    path = tmp_path / "locked.gguf"
    path.write_bytes(b"GGUF" + bytes(64))
    path.chmod(0)
    return path


def bad_paths(tmp_path: Path, default_model_file: Path) -> dict[str, tuple[Path, str]]:
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    text = tmp_path / "notes.gguf"
    text.write_text("this is not a model\n")
    head = default_model_file.read_bytes()[:4096]
    cut_header = tmp_path / "cut-header.gguf"
    cut_header.write_bytes(head)
    cut_data = tmp_path / "cut-data.gguf"
    with default_model_file.open("rb") as source:
        cut_data.write_bytes(source.read(default_model_file.stat().st_size - 1000))
    return {
        "missing": (tmp_path / "nope.gguf", "no such file"),
        "directory": (tmp_path, "is a directory"),
        "zero bytes": (empty, "empty"),
        "not gguf": (text, "not a GGUF file"),
        "truncated header": (cut_header, "truncated"),
        "truncated data": (cut_data, "truncated"),
        "unreadable": (unreadable_file(tmp_path), "read"),
    }


CASES = [
    "missing",
    "directory",
    "zero bytes",
    "not gguf",
    "truncated header",
    "truncated data",
    "unreadable",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_model_files_raise_one_line_model_file_errors(
    case: str, tmp_path: Path, default_model_file: Path
) -> None:
    path, expected = bad_paths(tmp_path, default_model_file)[case]
    with pytest.raises(ModelFileError) as raised:
        open_gguf(path)
    message = str(raised.value)
    assert expected in message
    assert "\n" not in message
    assert str(path) in message


def test_a_good_model_passes_the_checks(default_model_file: Path) -> None:
    assert check_model_path(default_model_file) == default_model_file
    reader = open_gguf(default_model_file)
    assert len(reader.tensors) == 272


def test_inventory_refuses_bad_files_too(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="no such file"):
        read_inventory(tmp_path / "missing.gguf")
