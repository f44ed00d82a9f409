"""The message box: Enter sends, Shift+Enter starts a new line, Esc stops the reply."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QPlainTextEdit


class MessageInput(QPlainTextEdit):
    submitted = Signal(str)
    stop_requested = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.setPlaceholderText("Message (Enter sends, Shift+Enter new line, Esc stops)")
        self.setMaximumHeight(120)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt's name
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
            event.modifiers() & Qt.KeyboardModifier.ShiftModifier
        ):
            self.submit()
            return
        if event.key() == Qt.Key.Key_Escape:
            self.stop_requested.emit()
            return
        super().keyPressEvent(event)

    def submit(self) -> None:
        text = self.toPlainText()
        if text.strip():
            self.clear()
            self.submitted.emit(text)
