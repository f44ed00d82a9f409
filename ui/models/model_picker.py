"""The model picker at the top of the chat window: switch models without opening a dialog.

Why a combo box: LM Studio and Jan put the loaded model at the top of the chat,
one click from the others. It draws `app.screen_text.model_choices.PickerEntry` values and
says what the user chose; loading is the caller's (ChatController.load_model).

Choosing is deliberate: a model load takes seconds and memory, so arrow keys
on the closed box open the list instead of loading each model passed over,
and the mouse wheel scrolls the window instead of the choice. Redrawing never
emits, so showing the loaded model cannot start a load.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent, QWheelEvent
from PySide6.QtWidgets import QComboBox, QSizePolicy, QWidget

from app.screen_text.model_choices import PickerEntry

MANAGE_TEXT = "Get or import models…"
PLACEHOLDER = "Choose a model"
ACCESSIBLE_NAME = "Model"
_MANAGE = "manage"  # the data of the last item, which opens the model manager
_OPENING_KEYS = frozenset(
    {Qt.Key.Key_Up, Qt.Key.Key_Down, Qt.Key.Key_PageUp, Qt.Key.Key_PageDown,
     Qt.Key.Key_Home, Qt.Key.Key_End}
)  # fmt: skip


class ModelPicker(QComboBox):
    """The models to switch to, the loaded one selected, and a way to get more."""

    model_chosen = Signal(str, object)  # model path, projector path or None
    manage_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName(ACCESSIBLE_NAME)
        self.setAccessibleDescription("The model this chat runs on; choose another to load it")
        self.setPlaceholderText(PLACEHOLDER)
        self.view().setAccessibleName("Models to choose from")
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
        self._entries: list[PickerEntry] = []
        self._shown_path: str | None = None  # the model the box shows as loaded
        self.activated.connect(self._on_activated)  # the user's choices only, never ours
        self.show_entries([], None)

    # -- what it shows -------------------------------------------------------------------------

    def show_entries(self, entries: list[PickerEntry], current_path: str | None) -> None:
        """Redraw the list with `current_path` selected (nothing selected when it is not in
        the list); emits nothing."""
        blocked = self.blockSignals(True)
        try:
            self.clear()
            self._entries = list(entries)
            for entry in self._entries:
                self.addItem(entry.label, entry.path)
                tip = f"{entry.path}\n(the default model)" if entry.is_default else entry.path
                self.setItemData(self.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
            if self._entries:
                self.insertSeparator(self.count())
            self.addItem(MANAGE_TEXT, _MANAGE)
        finally:
            self.blockSignals(blocked)
        self.select_path(current_path)

    def select_path(self, path: str | None) -> None:
        """Show `path` as the loaded model (after a load, or to undo a choice that failed)."""
        index = self._index_of(path)
        blocked = self.blockSignals(True)
        self.setCurrentIndex(index)
        self.blockSignals(blocked)
        self._shown_path = self._entries[index].path if index >= 0 else None

    def entries(self) -> list[PickerEntry]:
        return list(self._entries)

    def current_entry(self) -> PickerEntry | None:
        """The entry shown as loaded, or None."""
        path = self.currentData()
        return next((entry for entry in self._entries if entry.path == path), None)

    # -- choosing ------------------------------------------------------------------------------

    def _on_activated(self, index: int) -> None:
        data = self.itemData(index)
        if data == _MANAGE:
            self.select_path(self._shown_path)
            self.manage_requested.emit()
            return
        entry = next((e for e in self._entries if e.path == data), None)
        if entry is None or entry.path == self._shown_path:
            return  # the loaded model chosen again: nothing to load
        self._shown_path = entry.path
        self.model_chosen.emit(entry.path, entry.mmproj)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt's name)
        if event.key() in _OPENING_KEYS:
            self.showPopup()  # move through the list there; Enter chooses
            event.accept()
            return
        super().keyPressEvent(event)

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 (Qt's name)
        event.ignore()  # let the window scroll; a wheel turn must not load a model

    def _index_of(self, path: str | None) -> int:
        if path is None:
            return -1
        wanted = _resolved(path)
        for index, entry in enumerate(self._entries):
            if entry.path == path or _resolved(entry.path) == wanted:
                return index  # entries come first, in order, before the separator
        return -1


def _resolved(path: str) -> Path:
    try:
        return Path(path).expanduser().resolve()
    except OSError:
        return Path(path)
