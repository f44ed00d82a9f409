"""The messages the chat view shows, as a plain Qt list model.

The view only renders this model, and the controller only changes it: a
conversation opened, a message added, the streaming reply grown, a message
deleted. Each row carries a version that goes up whenever its text changes, so
the view can keep a finished message's rendering for as long as it is shown
and redo only the row that changed (the streaming reply).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt

from app.conversation.message_row import MessageRow

MESSAGE_ROLE = Qt.ItemDataRole.UserRole + 1
AnyIndex = QModelIndex | QPersistentModelIndex


class ConversationModel(QAbstractListModel):
    def __init__(self) -> None:
        super().__init__()
        self._rows: list[MessageRow] = []

    def rowCount(self, parent: AnyIndex = QModelIndex()) -> int:  # noqa: B008, N802 - Qt's
        return 0 if parent.isValid() else len(self._rows)

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        row = self._rows[index.row()]
        if role == MESSAGE_ROLE:
            return row
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.AccessibleTextRole):
            return f"{row.speaker}: {row.text}"
        return None

    def rows(self) -> list[MessageRow]:
        return list(self._rows)

    def row(self, index: int) -> MessageRow:
        return self._rows[index]

    def set_rows(self, rows: Sequence[MessageRow]) -> None:
        """A conversation opened (or re-read): everything shown is replaced."""
        self.beginResetModel()
        self._rows = list(rows)
        self.endResetModel()

    def prepend(self, rows: Sequence[MessageRow]) -> None:
        """Older messages, read as the view scrolled up to them, go before the first."""
        if not rows:
            return
        self.beginInsertRows(QModelIndex(), 0, len(rows) - 1)
        self._rows[0:0] = rows
        self.endInsertRows()

    def append(self, row: MessageRow) -> None:
        at = len(self._rows)
        self.beginInsertRows(QModelIndex(), at, at)
        self._rows.append(row)
        self.endInsertRows()

    def replace_row(self, index: int, **changes: Any) -> None:
        """Change one row (text, thinking, stats, id); its version goes up."""
        old = self._rows[index]
        self._rows[index] = replace(old, version=old.version + 1, **changes)
        changed = self.index(index)
        self.dataChanged.emit(changed, changed)

    def remove(self, index: int, count: int = 1) -> None:
        """Remove `count` rows from `index` on (a deleted message, or everything after it)."""
        if count <= 0:
            return
        self.beginRemoveRows(QModelIndex(), index, index + count - 1)
        del self._rows[index : index + count]
        self.endRemoveRows()

    def find(self, message_id: int) -> int | None:
        """The row showing a stored message, if any."""
        for index, row in enumerate(self._rows):
            if row.message_id == message_id:
                return index
        return None
