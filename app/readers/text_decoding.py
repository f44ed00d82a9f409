"""Bytes to text for files that carry no encoding label: BOMs, UTF-8, then detection.

Why detection at all: notes written on older Windows machines are cp1252,
Japanese ones often Shift-JIS, and some editors save UTF-16. A byte-order
mark settles the question; otherwise strict UTF-8 (by far the most common)
is tried, and only then charset-normalizer guesses. Its guess ties on short
Western text (cp1250 and cp1252 score the same on French), so among tied
guesses the encodings most files are really written in win.

A file no encoding fits, or one holding NUL bytes that is not UTF-16/32, is
binary and refused with what it looks like, e.g. 'binary file (PNG image)'.
"""

from __future__ import annotations

import codecs

from app.readers.extraction import Extracted, UnreadableDocument

_BYTE_ORDER_MARKS = (  # UTF-32 first: its little-endian mark starts with UTF-16's
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_PREFERRED_ON_TIE = ("cp1252", "latin_1", "iso8859_15", "cp932", "gb18030", "cp1251", "cp1250")
_WIDE_ENCODINGS = ("utf-16", "utf-32")  # the only text encodings that hold NUL bytes
_MAGIC_LABELS = (
    (b"\x89PNG", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF8", "GIF image"),
    (b"PK\x03\x04", "ZIP archive"),
    (b"\x1f\x8b", "gzip archive"),
    (b"\x7fELF", "executable"),
    (b"GGUF", "GGUF model"),
    (b"SQLite format 3\x00", "SQLite database"),
)


def decode_text(data: bytes) -> Extracted:
    """The text and the encoding it was stored in; raises UnreadableDocument if binary."""
    for mark, encoding in _BYTE_ORDER_MARKS:
        if data.startswith(mark):
            return _decoded(data[len(mark) :], encoding)
    if b"\x00" not in data:
        try:
            return Extracted(data.decode("utf-8"), encoding="utf-8")
        except UnicodeDecodeError:
            pass
    return _detected(data)


def binary_label(data: bytes) -> str:
    """What a binary file looks like, for the skip reason."""
    for magic, label in _MAGIC_LABELS:
        if data.startswith(magic):
            return label
    return "contains NUL bytes" if b"\x00" in data else "no text encoding fits"


def _decoded(data: bytes, encoding: str) -> Extracted:
    try:
        return Extracted(data.decode(encoding), encoding=encoding)
    except UnicodeDecodeError:
        raise UnreadableDocument(f"binary file (not valid {encoding})") from None


def _detected(data: bytes) -> Extracted:
    encoding = _likeliest_encoding(data)
    if encoding is None or (b"\x00" in data and not encoding.startswith(_WIDE_ENCODINGS)):
        raise UnreadableDocument(f"binary file ({binary_label(data)})")
    return _decoded(data, encoding)


def _likeliest_encoding(data: bytes) -> str | None:
    import charset_normalizer  # its models: only for text no encoding above reads

    matches = list(charset_normalizer.from_bytes(data))
    if not matches:
        return None
    best = matches[0]
    tied = [m for m in matches if (m.chaos, m.coherence) == (best.chaos, best.coherence)]
    for preferred in _PREFERRED_ON_TIE:
        if any(preferred in match.could_be_from_charset for match in tied):
            return codecs.lookup(preferred).name
    return codecs.lookup(best.encoding).name
