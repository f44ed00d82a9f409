"""Reading documents for batch summaries: every format from real files, every bad file refused.

Files are written in each test's tmp_path: text in several encodings, HTML,
a DOCX made with python-docx, PDFs assembled byte by byte with a real
Helvetica text layer (pypdf reads PDFs but cannot lay out text), and the bad
cases a folder of someone's documents really holds.
"""

from __future__ import annotations

import os
import random
import struct
import zipfile
import zlib
from pathlib import Path

import docx
import pytest

from app.summaries.document_readers import (
    DEFAULT_MAX_BYTES,
    Document,
    UnreadableDocument,
    document_kind,
    read_document,
)
from engine.errors import BadInputError

FRENCH = (
    "Le café crème coûte deux euros. À la française, l'été dernier, nous avons mangé "
    "des crêpes près de la forêt. « Très bien », dit-il.\n"
)
JAPANESE = "日本語のテキストです。これは要約のためのテストファイルです。東京は日本の首都です。\n"
RUNNING_AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def minimal_pdf(page_streams: list[bytes]) -> bytes:
    """A valid PDF: one page per content stream, Helvetica as /F1, a correct xref table."""
    count = len(page_streams)
    kids = " ".join(f"{4 + 2 * index} 0 R" for index in range(count))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for index, stream in enumerate(page_streams):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * index)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref_at,
    )
    return bytes(out)


def text_stream(*lines: str) -> bytes:
    """A content stream that writes each line in 12 pt Helvetica, one under the other."""
    shown = b" ".join(b"(%s) Tj T*" % line.encode("latin-1") for line in lines)
    return b"BT /F1 12 Tf 72 720 Td 14 TL " + shown + b" ET"


def png_bytes() -> bytes:
    """A real 1x1 PNG image."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def refusal(path: Path, **kwargs: int) -> str:
    with pytest.raises(UnreadableDocument) as caught:
        read_document(path, **kwargs)
    reason = str(caught.value)
    assert "\n" not in reason and reason == caught.value.reason
    return reason


# --- plain text in its encodings -------------------------------------------------


def test_utf8_text_is_read_as_is(tmp_path: Path) -> None:
    path = write(tmp_path / "notes.txt", "Grüße aus Köln — ✓\nsecond line\n".encode())
    document = read_document(path)
    assert document == Document(
        path, "Grüße aus Köln — ✓\nsecond line\n", "text", None, 31, "utf-8"
    )


def test_a_utf8_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    path = write(tmp_path / "bom.txt", b"\xef\xbb\xbfhello with a BOM\n")
    document = read_document(path)
    assert (document.text, document.encoding) == ("hello with a BOM\n", "utf-8")


def test_utf16_with_a_byte_order_mark_and_windows_newlines(tmp_path: Path) -> None:
    path = write(tmp_path / "wide.txt", "Zeile eins: Größe\r\nZeile zwei\r\n".encode("utf-16"))
    document = read_document(path)
    assert document.text == "Zeile eins: Größe\nZeile zwei\n"
    assert document.encoding == "utf-16-le"


def test_cp1252_accents_are_detected_not_garbled(tmp_path: Path) -> None:
    path = write(tmp_path / "lettre.txt", FRENCH.encode("cp1252"))
    document = read_document(path)
    assert document.text == FRENCH
    assert document.encoding == "cp1252"


def test_shift_jis_is_detected(tmp_path: Path) -> None:
    path = write(tmp_path / "memo.txt", JAPANESE.encode("shift_jis"))
    assert read_document(path).text == JAPANESE


def test_old_mac_newlines_become_line_feeds(tmp_path: Path) -> None:
    path = write(tmp_path / "mac.txt", b"one\rtwo\rthree")
    assert read_document(path).text == "one\ntwo\nthree"


# --- kinds by name and by content --------------------------------------------------


def test_markdown_keeps_its_markup(tmp_path: Path) -> None:
    source = "# Plan\n\n- [ ] write the *readers*\n- [x] **scan** folders\n"
    document = read_document(write(tmp_path / "PLAN.MD", source.encode()))
    assert (document.kind, document.text) == ("markdown", source)


def test_python_source_is_code(tmp_path: Path) -> None:
    source = 'def greet(name: str) -> str:\n    return f"hello {name}"\n'
    document = read_document(write(tmp_path / "greet.py", source.encode()))
    assert (document.kind, document.text, document.pages) == ("code", source, None)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("Makefile", "code"),
        ("query.SQL", "code"),
        ("config.yaml", "code"),
        ("page.xhtml", "html"),
        ("report.pdf", "pdf"),
        ("letter.docx", "docx"),
        ("README", None),
        ("notes.unknownext", None),
    ],
)
def test_kind_by_name(name: str, kind: str | None) -> None:
    assert document_kind(Path(name)) == kind


def test_a_file_without_extension_is_text_when_its_content_is(tmp_path: Path) -> None:
    document = read_document(write(tmp_path / "LICENSE", b"MIT License\n\nCopyright...\n"))
    assert (document.kind, document.text) == ("text", "MIT License\n\nCopyright...\n")


def test_a_pdf_without_its_extension_is_still_read_as_pdf(tmp_path: Path) -> None:
    path = write(tmp_path / "download", minimal_pdf([text_stream("Found by its header.")]))
    document = read_document(path)
    assert (document.kind, document.text) == ("pdf", "Found by its header.")


# --- HTML ----------------------------------------------------------------------------

PAGE = b"""<!DOCTYPE html>
<html><head><title>Quarterly notes</title>
<style>p { color: red; }</style>
<script>var secret = "do not show";</script></head>
<body><!-- a comment nobody reads -->
<h1>Results</h1>
<p>Sales   rose
by <b>ten</b> percent.</p>
<p>Costs fell.<br>Staff stayed the same.</p>
<table><tr><th>Region</th><th>Growth</th></tr><tr><td>North</td><td>12%</td></tr></table>
<noscript>Enable JavaScript</noscript>
</body></html>"""


def test_html_keeps_visible_text_and_paragraph_breaks(tmp_path: Path) -> None:
    document = read_document(write(tmp_path / "notes.html", PAGE))
    assert document.kind == "html"
    assert document.text == (
        "Quarterly notes\n\nResults\n\nSales rose by ten percent.\n\n"
        "Costs fell.\nStaff stayed the same.\n\nRegion | Growth\nNorth | 12%"
    )
    for hidden in ("secret", "color", "comment", "JavaScript"):
        assert hidden not in document.text


def test_html_uses_the_charset_it_declares(tmp_path: Path) -> None:
    page = '<meta charset="windows-1252"><p>Crème brûlée</p>'.encode("cp1252")
    document = read_document(write(tmp_path / "dessert.htm", page))
    assert (document.text, document.encoding) == ("Crème brûlée", "cp1252")


def test_html_without_a_charset_is_detected(tmp_path: Path) -> None:
    page = f"<html><body><p>{FRENCH}</p></body></html>".encode("cp1252")
    document = read_document(write(tmp_path / "lettre.html", page))
    assert document.text == FRENCH.strip()


def test_html_with_only_markup_has_no_text(tmp_path: Path) -> None:
    path = write(tmp_path / "empty.html", b"<html><head><script>x()</script></head></html>")
    assert refusal(path) == "no text (only whitespace or markup)"


# --- DOCX ----------------------------------------------------------------------------


def test_docx_paragraphs_and_table_cells_in_reading_order(tmp_path: Path) -> None:
    word = docx.Document()
    word.add_heading("Budget 2025", level=1)
    word.add_paragraph("The table below lists the costs.")
    table = word.add_table(rows=3, cols=2)
    for row, cells in enumerate([("Item", "Cost"), ("Rent", "900"), ("Total", "")]):
        for column, text in enumerate(cells):
            table.cell(row, column).text = text
    table.cell(2, 0).merge(table.cell(2, 1)).text = "Total: 900"
    word.add_paragraph("Questions go to Zoë.")
    path = tmp_path / "budget.docx"
    word.save(path)

    document = read_document(path)
    assert document.kind == "docx"
    assert document.text == (
        "Budget 2025\n\nThe table below lists the costs.\n\n"
        "Item | Cost\nRent | 900\nTotal: 900\n\nQuestions go to Zoë."
    )
    assert (document.pages, document.encoding, document.characters) == (
        None,
        None,
        len(document.text),
    )


def test_a_corrupt_docx_is_one_line(tmp_path: Path) -> None:
    assert refusal(write(tmp_path / "broken.docx", b"PK\x03\x04 cut short")).startswith(
        "corrupt DOCX ("
    )


def test_a_zip_that_is_not_a_word_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "renamed.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("hello.txt", "not a document")
    assert refusal(path).startswith("corrupt DOCX (")


# --- PDF -----------------------------------------------------------------------------


def test_pdf_pages_are_counted_and_joined_by_blank_lines(tmp_path: Path) -> None:
    pdf = minimal_pdf([text_stream("Page one, first line.", "Second line."), text_stream("Two.")])
    document = read_document(write(tmp_path / "report.pdf", pdf))
    assert (document.kind, document.pages) == ("pdf", 2)
    assert document.text == "Page one, first line.\nSecond line.\n\nTwo."


def test_a_pdf_without_a_text_layer_is_called_a_scan(tmp_path: Path) -> None:
    drawing_only = minimal_pdf([b"0 0 m 200 200 l S", b"10 10 100 100 re f"])
    assert refusal(write(tmp_path / "scan.pdf", drawing_only)) == "no text layer (scanned PDF?)"


@pytest.mark.parametrize(
    "damage",
    [
        lambda pdf: pdf[: len(pdf) // 2],
        lambda pdf: b"%PDF-1.4\n" + bytes(range(256)) * 8,
        lambda pdf: pdf.replace(b"/Pages 2 0 R", b"/Pages 99 0 R"),
    ],
    ids=["truncated", "garbage", "dangling-reference"],
)
def test_a_corrupt_pdf_is_one_line(tmp_path: Path, damage) -> None:
    pdf = minimal_pdf([text_stream("Soon to be broken.")])
    reason = refusal(write(tmp_path / "broken.pdf", damage(pdf)))
    assert reason.startswith("corrupt PDF (") and reason.endswith(")")


# --- files with nothing to read -----------------------------------------------------


@pytest.mark.parametrize("name", ["empty.txt", "empty.pdf", "empty.docx", "empty"])
def test_a_zero_length_file_is_empty(tmp_path: Path, name: str) -> None:
    assert refusal(write(tmp_path / name, b"")) == "empty file"


def test_whitespace_only_has_no_text(tmp_path: Path) -> None:
    assert refusal(write(tmp_path / "blank.md", b" \n\t\r\n  ")) == (
        "no text (only whitespace or markup)"
    )


def test_a_png_is_a_binary_file(tmp_path: Path) -> None:
    assert refusal(write(tmp_path / "photo.png", png_bytes())) == "binary file (PNG image)"


def test_random_bytes_are_a_binary_file(tmp_path: Path) -> None:
    noise = random.Random(6).randbytes(4096)
    assert refusal(write(tmp_path / "blob.dat", noise)).startswith("binary file (")


def test_random_bytes_without_nul_are_still_binary(tmp_path: Path) -> None:
    noise = random.Random(7).randbytes(4096).replace(b"\x00", b"\x01")
    assert refusal(write(tmp_path / "blob2.dat", noise)) == "binary file (no text encoding fits)"


def test_a_text_extension_does_not_make_binary_text(tmp_path: Path) -> None:
    path = write(tmp_path / "lies.txt", b"starts like text\x00\x00\x01\x02\x00 then not")
    assert refusal(path) == "binary file (contains NUL bytes)"


def test_a_known_but_unsupported_format_says_so(tmp_path: Path) -> None:
    path = write(tmp_path / "sheet.xlsx", b"PK\x03\x04whatever")
    assert refusal(path) == "unsupported type (Excel workbook, .xlsx)"


def test_a_file_over_the_limit_is_too_large(tmp_path: Path) -> None:
    path = write(tmp_path / "big.txt", b"x" * 2048)
    assert refusal(path, max_bytes=1024) == "too large (2.0 KiB; the limit is 1.0 KiB)"
    assert read_document(path, max_bytes=2048).characters == 2048
    assert DEFAULT_MAX_BYTES == 50 * 1024**2


@pytest.mark.skipif(RUNNING_AS_ROOT, reason="root reads files whatever their mode")
def test_an_unreadable_file_is_permission_denied(tmp_path: Path) -> None:
    path = write(tmp_path / "secret.txt", b"private")
    path.chmod(0)
    try:
        assert refusal(path) == "permission denied"
    finally:
        path.chmod(0o600)


def test_a_missing_file_a_folder_and_a_pipe_are_refused(tmp_path: Path) -> None:
    assert refusal(tmp_path / "gone.txt") == "file not found"
    (tmp_path / "folder.txt").mkdir()
    assert refusal(tmp_path / "folder.txt") == "not a regular file"
    os.mkfifo(tmp_path / "pipe.txt")
    assert refusal(tmp_path / "pipe.txt") == "not a regular file"  # and did not block


def test_a_symlink_loop_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.txt").symlink_to(tmp_path / "b.txt")
    (tmp_path / "b.txt").symlink_to(tmp_path / "a.txt")
    assert refusal(tmp_path / "a.txt") == "symlink loop"


def test_unusual_names_are_read(tmp_path: Path) -> None:
    for name in ("with spaces.txt", "ünïcødé 文書.md", "new\nline.txt", "-dash.txt"):
        document = read_document(write(tmp_path / name, name.encode()))
        assert document.text == name


def test_an_unreadable_document_is_bad_input() -> None:
    assert issubclass(UnreadableDocument, BadInputError)
