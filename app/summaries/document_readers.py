"""One file in, its plain text out: the reading step of batch summarisation.

A summary job reads whatever a folder holds, so every way a file can be
useless (empty, binary, too big, unreadable, damaged, a scan without text)
ends in `UnreadableDocument` with a one-line reason the job reports before it
moves on; nothing here raises anything else on a bad file.

The kind comes from the extension through one table; a file whose extension
we do not know is read as plain text when its content is text (README,
LICENSE, Makefile...) and as a PDF when it starts like one. The formats
themselves live in `app.readers`, one module each.
"""

from __future__ import annotations

import errno
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from app.readers.extraction import Extracted, UnreadableDocument
from app.readers.text_decoding import decode_text
from app.screen_text.units import format_bytes

__all__ = ["DEFAULT_MAX_BYTES", "Document", "UnreadableDocument", "document_kind", "read_document"]

DocumentKind = Literal["text", "markdown", "code", "html", "pdf", "docx"]

DEFAULT_MAX_BYTES = 50 * 1024**2  # far beyond any context window; stops a stray disk image
PDF_MAGIC = b"%PDF-"

_SUFFIXES: dict[DocumentKind, str] = {
    "text": "txt text log csv tsv rst adoc asciidoc org tex srt vtt nfo",
    "markdown": "md markdown mdown mkd mkdn mdx",
    "code": (
        "py pyi pyx js jsx mjs cjs ts tsx c h cc cpp cxx hpp hh cs rs go java kt kts scala "
        "swift m mm rb php pl pm lua r jl dart zig nim hs ml mli ex exs erl clj el lisp scm "
        "sh bash zsh fish ps1 bat cmd sql json jsonl yaml yml toml ini cfg conf xml css scss "
        "sass less vue svelte gradle cmake mk proto graphql tf nix vim diff patch"
    ),
    "html": "html htm xhtml",
    "pdf": "pdf",
    "docx": "docx",
}
_KIND_BY_SUFFIX = {f".{s}": kind for kind, words in _SUFFIXES.items() for s in words.split()}
_CODE_FILE_NAMES = {"makefile", "dockerfile", "containerfile", "justfile", "rakefile", "gemfile"}
_UNSUPPORTED_SUFFIXES = {
    ".doc": "Word 97-2003 document",
    ".rtf": "RTF document",
    ".odt": "OpenDocument text",
    ".xls": "Excel workbook",
    ".xlsx": "Excel workbook",
    ".ods": "OpenDocument spreadsheet",
    ".ppt": "PowerPoint presentation",
    ".pptx": "PowerPoint presentation",
    ".odp": "OpenDocument presentation",
    ".epub": "e-book",
    ".pages": "Pages document",
}


# HTML, PDF and Word readers (BeautifulSoup with lxml, pypdf, python-docx) are imported
# with the first such file: the window and the command line start without them


def _html_text(data: bytes) -> Extracted:
    from app.readers.html_text import html_text

    return html_text(data)


def _pdf_text(data: bytes) -> Extracted:
    from app.readers.pdf_text import pdf_text

    return pdf_text(data)


def _docx_text(data: bytes) -> Extracted:
    from app.readers.docx_text import docx_text

    return docx_text(data)


_EXTRACTORS: dict[DocumentKind, Callable[[bytes], Extracted]] = {
    "text": decode_text,
    "markdown": decode_text,
    "code": decode_text,
    "html": _html_text,
    "pdf": _pdf_text,
    "docx": _docx_text,
}
_OPEN_ERRORS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOENT: "file not found",
    errno.ELOOP: "symlink loop",
}


@dataclass(frozen=True)
class Document:
    path: Path
    text: str
    kind: DocumentKind
    pages: int | None  # PDF only
    characters: int
    encoding: str | None  # text-based kinds only: the encoding the file was stored in


def document_kind(path: Path) -> DocumentKind | None:
    """The kind the file name promises, or None when only the content can tell."""
    if path.name.lower() in _CODE_FILE_NAMES:
        return "code"
    return _KIND_BY_SUFFIX.get(path.suffix.lower())


def read_document(path: Path | str, max_bytes: int = DEFAULT_MAX_BYTES) -> Document:
    """The text of one file; raises UnreadableDocument with the reason when there is none."""
    path = Path(path)
    _refuse_unsupported(path)
    data = _file_bytes(path, max_bytes)
    kind = document_kind(path) or ("pdf" if data.startswith(PDF_MAGIC) else "text")
    extracted = _EXTRACTORS[kind](data)
    text = _normalised_newlines(extracted.text)
    if not text.strip():
        raise UnreadableDocument("no text (only whitespace or markup)")
    return Document(path, text, kind, extracted.pages, len(text), extracted.encoding)


def _refuse_unsupported(path: Path) -> None:
    suffix = path.suffix.lower()
    if suffix in _UNSUPPORTED_SUFFIXES:
        raise UnreadableDocument(f"unsupported type ({_UNSUPPORTED_SUFFIXES[suffix]}, {suffix})")


def _file_bytes(path: Path, max_bytes: int) -> bytes:
    """The whole file, refused before reading when it is not a regular file, empty or too big."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableDocument("not a regular file")
        _check_size(info.st_size, max_bytes)
        with path.open("rb") as stream:
            data = stream.read(max_bytes + 1)  # the file may have grown since stat
    except OSError as exc:
        reason = _OPEN_ERRORS.get(exc.errno or 0) or (exc.strerror or str(exc)).lower()
        raise UnreadableDocument(reason) from None
    if len(data) > max_bytes:
        raise UnreadableDocument(f"too large (grew past the limit of {format_bytes(max_bytes)})")
    if not data:
        raise UnreadableDocument("empty file")
    return data


def _check_size(size: int, max_bytes: int) -> None:
    if size == 0:
        raise UnreadableDocument("empty file")
    if size > max_bytes:
        limit = format_bytes(max_bytes)
        raise UnreadableDocument(f"too large ({format_bytes(size)}; the limit is {limit})")


def _normalised_newlines(text: str) -> str:
    return text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
