"""The conversation, rendered as Markdown (headings, lists, tables, code) as it streams in.

It renders what it is given and owns nothing: the controller passes the
messages, and while a reply streams it passes the growing text, which is
re-rendered at most every RENDER_INTERVAL_MS so long replies stay smooth.
Every finished code block has a copy link under it; other links open in the
system browser.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QTextBrowser

from ui.code_blocks import COPY_SCHEME, with_copy_links

RENDER_INTERVAL_MS = 50
_SPEAKERS = {"user": "You", "assistant": "Assistant", "system": "System"}


class ChatView(QTextBrowser):
    code_copied = Signal(str)  # the code put on the clipboard

    def __init__(self) -> None:
        super().__init__()
        self.setAccessibleName("Conversation")
        self.setOpenLinks(False)  # copy links are ours; web links go to the browser
        self.anchorClicked.connect(self._on_link)
        self._messages: list[tuple[str, str]] = []
        self._streaming: str | None = None
        self._codes: list[str] = []
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

    def code_blocks(self) -> list[str]:
        """The code of every finished block shown, in order (what the copy links copy)."""
        return list(self._codes)

    def copy_code(self, index: int) -> None:
        QGuiApplication.clipboard().setText(self._codes[index])
        self.code_copied.emit(self._codes[index])

    def _on_link(self, url: QUrl) -> None:
        if url.scheme() == COPY_SCHEME:
            index = int(url.path()) if url.path().isdigit() else -1
            if 0 <= index < len(self._codes):
                self.copy_code(index)
        elif url.scheme() in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)

    def _render(self) -> None:
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        text, self._codes = with_copy_links(self.markdown())
        self.setMarkdown(text)
        if at_bottom:
            bar.setValue(bar.maximum())
