"""Helpers for the bundle: tidy the Python binaries, find what must not ship.

Used by shardchat.spec (after PyInstaller has collected the bundle), by build.py
and by tests/installer. Standard library only.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

# directories and files that are test data, caches or build leftovers, never app content
LEFTOVER_DIRS = {
    "tests",
    "test",
    "__pycache__",
    ".git",
    ".pytest_cache",
    ".hypothesis",
    ".ruff_cache",
    ".cache",
    ".venv",
}
LEFTOVER_SUFFIXES = (".pyc", ".pyo", ".egg-info", ".orig", ".rej")

_DT_NULL, _DT_RPATH, _DT_RUNPATH = 0, 15, 29
_PT_DYNAMIC = 2


def leftovers(bundle: Path) -> list[str]:
    """Paths in the bundle (relative) that are tests, caches, bytecode files or VCS data.

    Python modules live inside PyInstaller's archive (PYZ in the executable,
    base_library.zip), so a loose .pyc file or a __pycache__ folder is a leftover.
    """
    found = []
    for path in sorted(bundle.rglob("*")):
        name = path.name
        if (path.is_dir() and name in LEFTOVER_DIRS) or name.endswith(LEFTOVER_SUFFIXES):
            found.append(path.relative_to(bundle).as_posix())
    return found


def remove_runpath(path: Path) -> bool:
    """Drop DT_RPATH/DT_RUNPATH from a 64-bit little-endian ELF file, as `patchelf
    --remove-rpath` does: later dynamic entries move up, DT_NULL fills the end.

    A self-built Python (pyenv) links libpython and its extension modules with
    RUNPATH=<its own prefix>/lib: a path of the build machine, meaningless (and
    flagged by lintian) in the bundle, which finds libpython beside the executable.
    Returns whether the file changed; other ELF classes are left alone.
    """
    data = bytearray(path.read_bytes())
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:  # ELFCLASS64, little-endian
        return False
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for index in range(phnum):
        header = phoff + index * phentsize
        p_type = struct.unpack_from("<I", data, header)[0]
        if p_type != _PT_DYNAMIC:
            continue
        offset = struct.unpack_from("<Q", data, header + 8)[0]  # p_offset
        size = struct.unpack_from("<Q", data, header + 32)[0]  # p_filesz
        entries = []
        for at in range(offset, offset + size - 15, 16):
            tag, value = struct.unpack_from("<qQ", data, at)
            if tag == _DT_NULL:
                break
            entries.append((tag, value))
        kept = [(t, v) for t, v in entries if t not in (_DT_RPATH, _DT_RUNPATH)]
        if len(kept) == len(entries):
            return False
        for number in range(size // 16):
            tag, value = kept[number] if number < len(kept) else (_DT_NULL, 0)
            struct.pack_into("<qQ", data, offset + number * 16, tag, value)
        path.write_bytes(bytes(data))
        return True
    return False


def tidy_python_binaries(internal: Path) -> int:
    """Strip libpython and the standard library's extension modules and drop their build
    machine RUNPATH (Linux). Only those: wheels' vendored libraries are patched by
    auditwheel, and `strip` corrupts them ("ELF load command ... not page-aligned").
    Returns how many files were tidied."""
    files = [*internal.glob("libpython3*.so*"), *internal.glob("python3*/lib-dynload/*.so")]
    strip = shutil.which("strip")
    tidied = 0
    for path in files:
        if path.is_symlink() or not path.is_file():
            continue
        if strip:
            subprocess.run([strip, "--strip-unneeded", str(path)], check=True)
        remove_runpath(path)
        tidied += 1
    return tidied
