"""The text of a Word (.docx) document, read with python-docx, in reading order.

Paragraphs and tables are taken as they appear in the body, so a table sits
between the paragraphs around it; each table row becomes one line of cells
joined by ' | ', with a merged cell written once. A damaged file is refused
in one line (the traceback goes to the debug log): python-docx and zipfile
raise many different exceptions for it.
"""

from __future__ import annotations

import io
import logging

import docx
from docx.document import Document as WordDocument
from docx.table import Table

from app.readers.extraction import Extracted, UnreadableDocument, short_reason

log = logging.getLogger(__name__)


def docx_text(data: bytes) -> Extracted:
    """Paragraphs and table rows in order, blank lines between them."""
    try:
        blocks = _blocks(docx.Document(io.BytesIO(data)))
    except Exception as exc:  # any failure on a damaged or foreign file
        log.debug("python-docx failed", exc_info=True)
        raise UnreadableDocument(f"corrupt DOCX ({short_reason(exc)})") from None
    return Extracted("\n\n".join(block for block in blocks if block.strip()))


def _blocks(document: WordDocument) -> list[str]:
    return [
        _table_text(block) if isinstance(block, Table) else block.text
        for block in document.iter_inner_content()
    ]


def _table_text(table: Table) -> str:
    return "\n".join(" | ".join(_row_cells(row)) for row in table.rows)


def _row_cells(row) -> list[str]:
    cells, previous = [], None
    for cell in row.cells:
        if previous is None or cell._tc is not previous._tc:
            cells.append(cell.text.strip())
        previous = cell
    return cells
