"""The window as the person left it: geometry, docks, and the conversation that was open.

Kept with Qt's QSettings in an INI file in ShardChat's data folder (so
SHARDCHAT_HOME isolates it like every other file), not in the chat history:
it is a property of this desktop, not of the conversations.
"""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QSettings
from PySide6.QtWidgets import QMainWindow

from app.paths import app_paths

FILE_NAME = "window.ini"


class WindowState:
    def __init__(self) -> None:
        paths = app_paths().ensure()
        self._settings = QSettings(str(paths.data_dir / FILE_NAME), QSettings.Format.IniFormat)

    def restore(self, window: QMainWindow) -> int | None:
        """Put the window back where it was; returns the conversation that was open."""
        geometry = self._settings.value("geometry")
        if isinstance(geometry, QByteArray):
            window.restoreGeometry(geometry)
        state = self._settings.value("state")
        if isinstance(state, QByteArray):
            window.restoreState(state)
        conversation = self._settings.value("conversation")
        return int(conversation) if str(conversation or "").isdigit() else None

    def save(self, window: QMainWindow, conversation_id: int | None) -> None:
        self._settings.setValue("geometry", window.saveGeometry())
        self._settings.setValue("state", window.saveState())
        self._settings.setValue("conversation", conversation_id or "")
        self._settings.sync()
