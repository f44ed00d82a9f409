"""The text layer of a PDF, page by page, read with pypdf.

A PDF that parses but yields no text is almost always a scan (pictures of
pages); it is refused with that hint rather than summarised as nothing.
pypdf raises a wide and changing set of exceptions on damaged files (its own,
plus ValueError, KeyError, zlib errors...), so any failure while parsing is a
corrupt file, reported in one line; the traceback goes to the debug log.
"""

from __future__ import annotations

import io
import logging

from pypdf import PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError

from app.readers.extraction import Extracted, UnreadableDocument, short_reason

log = logging.getLogger(__name__)


def pdf_text(data: bytes) -> Extracted:
    """Page texts joined by blank lines, with the page count."""
    try:
        page_texts = _page_texts(data)
    except FileNotDecryptedError:
        raise UnreadableDocument("encrypted PDF (needs a password)") from None
    except DependencyError as exc:  # AES needs the optional 'cryptography' package
        raise UnreadableDocument(f"encrypted PDF ({short_reason(exc)})") from None
    except Exception as exc:  # any parser failure on a damaged file
        log.debug("pypdf failed", exc_info=True)
        raise UnreadableDocument(f"corrupt PDF ({short_reason(exc)})") from None
    if not any(text.strip() for text in page_texts):
        raise UnreadableDocument("no text layer (scanned PDF?)")
    return Extracted("\n\n".join(text.strip() for text in page_texts), pages=len(page_texts))


def _page_texts(data: bytes) -> list[str]:
    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        reader.decrypt("")  # many PDFs are "encrypted" with an empty user password
    return [page.extract_text() or "" for page in reader.pages]
