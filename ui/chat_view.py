"""The conversation, rendered as Markdown (headings, lists, tables, code) as it streams in.

It renders what it is given and owns nothing: the controller passes the
messages, and while a reply streams it passes the growing text, which is
re-rendered at most every RENDER_INTERVAL_MS so long replies stay smooth.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QTextBrowser

RENDER_INTERVAL_MS = 50
_SPEAKERS = {"user": "You", "assistant": "Assistant", "system": "System"}


class ChatView(QTextBrowser):
    def __init__(self) -> None:
        super().__init__()
        self.setOpenExternalLinks(True)
        self._messages: list[tuple[str, str]] = []
        self._streaming: str | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(RENDER_INTERVAL_MS)
        self._timer.timeout.connect(self._render)

    def show_messages(self, messages: Sequence[tuple[str, str]]) -> None:
        """(role, text) pairs of the conversation; replaces what is shown."""
        self._messages = list(messages)
        self._streaming = None
        self._render()

    def show_streaming(self, text: str) -> None:
        """The reply as it grows; rendered after the shown messages."""
        self._streaming = text
        if not self._timer.isActive():
            self._timer.start()

    def markdown(self) -> str:
        shown = list(self._messages)
        if self._streaming is not None:
            shown.append(("assistant", self._streaming + " ▌"))
        return "\n\n---\n\n".join(
            f"**{_SPEAKERS.get(role, role)}**\n\n{text}" for role, text in shown
        )

    def _render(self) -> None:
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        self.setMarkdown(self.markdown())
        if at_bottom:
            bar.setValue(bar.maximum())
