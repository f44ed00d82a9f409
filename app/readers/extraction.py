"""What a format reader hands back, and the one error every reader raises.

Third-party parsers fail in many ways on damaged files; each reader turns
those failures into `UnreadableDocument` with a short reason, so a batch job
can report the file in one line and go on with the next one.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import BadInputError


class UnreadableDocument(BadInputError):
    """A file we will not summarise; the message is the reason, e.g. 'empty file'."""

    @property
    def reason(self) -> str:
        return str(self)


@dataclass(frozen=True)
class Extracted:
    text: str
    pages: int | None = None  # only formats that have pages (PDF)
    encoding: str | None = None  # only formats stored as encoded text


def short_reason(exc: BaseException) -> str:
    """The first line of a parser's message (or its class name), for a one-line report."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
