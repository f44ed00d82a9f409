"""The readable text of an HTML page: no scripts, styles or markup, paragraphs kept apart.

BeautifulSoup (with the standard library's parser) does the parsing. Its
`get_text()` either glues paragraphs together or breaks lines at every inline
tag, and HTML treats source newlines as spaces, so block boundaries are first
marked with private-use characters, all whitespace is collapsed as a browser
would, and only then do the marks become blank lines (or single line breaks
for `<br>` and lines inside `<pre>`). Table rows become lines of cells joined
by ' | ', as `app.readers.docx_text` writes them.

The encoding is the one the page declares (a BOM, `<meta charset>`), as
browsers do, else the one `app.readers.text_decoding` detects.
"""

from __future__ import annotations

import codecs
import re
import warnings

from bs4 import BeautifulSoup
from bs4.dammit import EncodingDetector

from app.readers.extraction import Extracted
from app.readers.text_decoding import decode_text

PARAGRAPH_MARK = "\ue000"
LINE_MARK = "\ue001"
_INVISIBLE_TAGS = ("script", "style", "noscript", "template", "svg", "canvas", "iframe", "object")
_BLOCK_TAGS = (
    "address", "article", "aside", "blockquote", "caption", "dd", "details", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
    "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table",
    "title", "ul",
)  # fmt: skip
_BYTE_ORDER_MARKS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)  # they win
_WEB_ALIASES = {"iso8859-1": "cp1252", "ascii": "cp1252"}  # as browsers read these labels


def html_text(data: bytes) -> Extracted:
    """The page's visible text, one blank line between blocks."""
    decoded = _decoded_html(data)
    markup = decoded.text.replace(PARAGRAPH_MARK, "").replace(LINE_MARK, "")
    with warnings.catch_warnings():  # XHTML and tiny inputs only draw advice from bs4
        warnings.simplefilter("ignore")
        soup = BeautifulSoup(markup, "html.parser")
    _mark_blocks(soup)
    return Extracted(_laid_out(soup.get_text()), encoding=decoded.encoding)


def _decoded_html(data: bytes) -> Extracted:
    declared = EncodingDetector.find_declared_encoding(data, is_html=True)
    encoding = _usable_encoding(declared) if declared else None
    if encoding and not data.startswith(_BYTE_ORDER_MARKS):
        try:
            return Extracted(data.decode(encoding), encoding=encoding)
        except UnicodeDecodeError:
            pass  # the declaration is wrong; detect instead
    return decode_text(data)


def _usable_encoding(label: str) -> str | None:
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    if name.startswith(("utf-16", "utf-32")):
        return None  # a page read as bytes cannot be UTF-16 and declare it in ASCII
    return _WEB_ALIASES.get(name, name)


def _mark_blocks(soup: BeautifulSoup) -> None:
    for tag in soup.find_all(_INVISIBLE_TAGS):
        tag.decompose()
    for pre in soup.find_all("pre"):
        for piece in pre.find_all(string=True):
            piece.replace_with(piece.replace("\n", LINE_MARK))
    for br in soup.find_all("br"):
        br.replace_with(LINE_MARK)
    for cell in soup.find_all(("td", "th")):
        if cell.find_previous_sibling(("td", "th")):
            cell.insert_before(" | ")
    for row in soup.find_all("tr"):
        row.insert_after(LINE_MARK)
    for tag in soup.find_all(_BLOCK_TAGS):
        tag.insert_before(PARAGRAPH_MARK)
        tag.insert_after(PARAGRAPH_MARK)


def _laid_out(text: str) -> str:
    text = re.sub(r"\s+", " ", text)
    text = text.replace(PARAGRAPH_MARK, "\n\n").replace(LINE_MARK, "\n")
    lines = [line.strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
