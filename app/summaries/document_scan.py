"""Which files of a folder a summary job reads, which it skips and why, and where it writes.

The scan only looks at the file system; whether a file holds text is
`app.summaries.document_readers`' question. It follows symlinks (people link notes in
from elsewhere) but enters each real folder once, so a link back to an
ancestor is reported as a symlink loop instead of recursing forever, and a
file reached twice (a link, a hard link) is read once. It never enters the
output folder, even when that lies inside the input folder.

Hidden entries (.git, .venv, .DS_Store) are left out by default, like the
include and exclude globs they are a choice, not a problem, so they are not
listed as skipped. Skipped entries are the problems: loops, broken links,
unreadable folders, devices and pipes.

Order is by relative path, folder by folder, ignoring case first, so two
runs over the same folder list the same files in the same order on every
platform.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from engine.errors import BadInputError

OUTPUT_SUFFIX = "-summaries"
_STAT_ERRORS = {
    errno.ELOOP: "symlink loop",
    errno.ENOENT: "broken symlink",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}

RelativePath = tuple[str, ...]
FileId = tuple[int, int]  # (device, inode): the same file or folder however it is reached


@dataclass(frozen=True)
class Skipped:
    path: Path
    reason: str


@dataclass
class FolderScan:
    folder: Path
    documents: list[Path] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def relative(self, path: Path) -> Path:
        """A found path relative to the scanned folder (how outputs are named)."""
        return path.relative_to(self.folder)


@dataclass(frozen=True)
class ScanRules:
    recursive: bool = True
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    output_id: FileId | None = None  # the output folder, never entered
    include_hidden: bool = False


def scan_folder(
    folder: Path | str,
    recursive: bool = True,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    output_dir: Path | str | None = None,
    include_hidden: bool = False,
) -> FolderScan:
    """The documents to read, sorted; raises BadInputError when folder is not a readable folder."""
    root = checked_folder(Path(folder).expanduser().absolute())
    output_id = _existing_identity(Path(output_dir).expanduser()) if output_dir else None
    rules = ScanRules(recursive, tuple(include), tuple(exclude), output_id, include_hidden)
    walk = _Walk(root, rules)
    walk.run()
    return FolderScan(root, *walk.results())


def default_output_folder(folder: Path | str) -> Path:
    """`<folder>-summaries` beside the input folder ('.' and '..' resolved by name)."""
    folder = Path(os.path.abspath(Path(folder).expanduser()))
    if not folder.name:
        raise BadInputError(f"choose an output folder: {folder} has no parent to put it in")
    return folder.with_name(folder.name + OUTPUT_SUFFIX)


def check_output_folder(input_folder: Path | str, out: Path | str | None = None) -> Path:
    """The output folder, created and proven writable; refused inside the input folder."""
    out_path = Path(out).expanduser().absolute() if out else default_output_folder(input_folder)
    input_real, out_real = _real(Path(input_folder).expanduser()), _real(out_path)
    if out_real == input_real or input_real in out_real.parents:
        raise BadInputError(
            f"the output folder {out_path} is inside the input folder {input_folder}; "
            "choose one outside it"
        )
    _make_writable_folder(out_path)
    return out_path


def _existing_identity(path: Path) -> FileId | None:
    try:
        return _identity(os.stat(path))
    except OSError:
        return None  # not there yet, so not inside the tree either


def checked_folder(folder: Path) -> Path:
    """The folder itself if it exists and can be listed; else one clear BadInputError."""
    try:
        info = folder.stat()
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise BadInputError(f"{folder} does not exist") from None
        raise BadInputError(f"cannot open {folder}: {_reason(exc)}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise BadInputError(f"{folder} is a file, not a folder; give the folder that holds it")
    try:
        with os.scandir(folder):
            pass
    except OSError as exc:
        raise BadInputError(f"cannot read the folder {folder}: {_reason(exc)}") from None
    return folder


def _make_writable_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise BadInputError(f"the output folder {folder} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"cannot create the output folder {folder}: {_reason(exc)}") from None
    try:
        handle, probe = tempfile.mkstemp(prefix=".shardchat-write-test-", dir=folder)
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise BadInputError(f"cannot write in the output folder {folder}: {_reason(exc)}") from None


class _Walk:
    """One pass over the tree, folders on a stack (no recursion limit), files collected.

    Folders are known by (device, inode), which also catches bind-mount loops.
    Linked folders wait until every real folder is entered, so a file inside
    the tree is always listed under its own path, not under a link to it.
    """

    def __init__(self, root: Path, rules: ScanRules) -> None:
        root_id = _identity(os.stat(root))
        self.root = root
        self.rules = rules
        self.entered = {root_id}
        self.pending: list[_Folder] = [_Folder(root, (), (root_id,))]
        self.linked: list[_Folder] = []
        self.files: list[tuple[RelativePath, FileId]] = []
        self.skipped: list[tuple[RelativePath, str]] = []

    def run(self) -> None:
        while self.pending or self.linked:
            if self.pending:
                self._scan(self.pending.pop())
            else:
                self._enter(self.linked.pop(0))

    def results(self) -> tuple[list[Path], list[Skipped]]:
        documents: list[Path] = []
        first_seen: dict[FileId, RelativePath] = {}
        for relative, identity in sorted(self.files, key=lambda item: _order(item[0])):
            if identity in first_seen:
                self.skipped.append((relative, f"same file as {'/'.join(first_seen[identity])}"))
                continue
            first_seen[identity] = relative
            documents.append(self.root.joinpath(*relative))
        skipped = sorted(self.skipped, key=lambda item: _order(item[0]))
        return documents, [Skipped(self.root.joinpath(*rel), reason) for rel, reason in skipped]

    def _scan(self, folder: _Folder) -> None:
        try:
            with os.scandir(folder.path) as entries:
                listed = sorted(entries, key=lambda entry: _order((entry.name,)))
        except OSError as exc:
            self.skipped.append((folder.relative, _reason(exc)))
            return
        for entry in listed:
            self._visit(entry, folder)

    def _visit(self, entry: os.DirEntry, parent: _Folder) -> None:
        relative = (*parent.relative, entry.name)
        if entry.name.startswith(".") and not self.rules.include_hidden:
            return
        if _matches(relative, self.rules.exclude):
            return
        try:
            info = os.stat(entry.path)
        except OSError as exc:
            if self._wanted_file(relative):
                self.skipped.append((relative, _STAT_ERRORS.get(exc.errno or 0, _reason(exc))))
            return
        if stat.S_ISDIR(info.st_mode):
            self._found_folder(_Folder(Path(entry.path), relative, parent.ancestors), entry)
        elif not self._wanted_file(relative):
            return
        elif stat.S_ISREG(info.st_mode):
            self.files.append((relative, _identity(info)))
        else:
            self.skipped.append((relative, "not a regular file"))

    def _found_folder(self, folder: _Folder, entry: os.DirEntry) -> None:
        if not self.rules.recursive:
            return
        if entry.is_symlink():
            self.linked.append(folder)
        else:
            self._enter(folder)

    def _enter(self, folder: _Folder) -> None:
        try:
            identity = _identity(os.stat(folder.path))
        except OSError as exc:  # removed or made unreadable since it was listed
            self.skipped.append((folder.relative, _reason(exc)))
            return
        if identity == self.rules.output_id:
            self.skipped.append((folder.relative, "the output folder"))
        elif identity in folder.ancestors:
            self.skipped.append((folder.relative, "symlink loop"))
        elif identity in self.entered:
            self.skipped.append((folder.relative, "symlink to a folder scanned already"))
        else:
            self.entered.add(identity)
            self.pending.append(
                _Folder(folder.path, folder.relative, (*folder.ancestors, identity))
            )

    def _wanted_file(self, relative: RelativePath) -> bool:
        return not self.rules.include or _matches(relative, self.rules.include)


@dataclass(frozen=True)
class _Folder:
    path: Path
    relative: RelativePath
    ancestors: tuple[FileId, ...]  # this folder's own identity last, once entered


def _matches(relative: RelativePath, globs: tuple[str, ...]) -> bool:
    """A glob matches the path relative to the folder ('docs/*.md') or the bare name."""
    joined = "/".join(relative)
    return any(fnmatch(joined, glob) or fnmatch(relative[-1], glob) for glob in globs)


def _order(relative: RelativePath) -> tuple[tuple[str, str], ...]:
    return tuple((part.casefold(), part) for part in relative)


def _identity(info: os.stat_result) -> FileId:
    return (info.st_dev, info.st_ino)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()
