"""The Help menu's windows: About (what runs here, where things are) and the keyboard shortcuts.

About says what a support call asks first: the version, the llama.cpp build and
the backends it loaded, the GPU a model would use, and the data and log folders,
with a button that opens the log folder and one that copies everything as text.
The facts come from app.screen_text.about (ui/ never imports llama_cpp).

The shortcuts are read from the window's own actions, so the list cannot drift
from what the keys do; the message box's keys, which are not actions, follow.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QAction, QDesktopServices, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLayout,
    QPushButton,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.screen_text.about import AboutFacts
from ui.tables import read_only_table

INPUT_KEYS = (
    ("Send the message", "Enter"),
    ("New line in the message", "Shift+Enter"),
    ("Stop the reply (in the message box)", "Esc"),
)


class AboutDialog(QDialog):
    def __init__(self, facts: AboutFacts, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.facts = facts
        self.setWindowTitle("About ShardChat")
        title = QLabel(f"<h2>ShardChat {facts.version}</h2>Chat with large local GGUF models "
                       "on small GPUs.")  # fmt: skip
        title.setMinimumWidth(600)  # the layout sizes the dialog to its wrapped rows
        form = QFormLayout()
        self.rows: dict[str, QLabel] = {}
        for label, text in self._rows():
            value = QLabel(text, wordWrap=True)
            value.setAccessibleName(label)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            form.addRow(label, value)
            self.rows[label] = value
        self.open_logs = QPushButton("Open the log folder")
        self.copy = QPushButton("Copy these details")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.addButton(self.open_logs, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(self.copy, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        self.open_logs.clicked.connect(lambda: open_folder(facts.log_dir))
        self.copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.as_text()))
        column = QVBoxLayout(self)
        column.setSizeConstraint(QLayout.SizeConstraint.SetMinimumSize)  # wrapped rows fit
        column.addWidget(title)
        column.addLayout(form)
        column.addWidget(buttons)

    def as_text(self) -> str:
        """Everything shown, as plain lines to paste into a bug report."""
        return "\n".join(
            [f"ShardChat {self.facts.version}", *(f"{k}: {v}" for k, v in self._rows())]
        )

    def _rows(self) -> list[tuple[str, str]]:
        facts = self.facts
        skipped = f"\n({facts.skipped_backends} other modules not loaded: another CPU's " \
            "variant, or no device for them)" if facts.skipped_backends else ""  # fmt: skip
        return [
            ("llama.cpp", facts.llama_build),
            (
                "Backends",
                "\n".join([facts.backend_folder.removeprefix("backends: "), *facts.backends])
                + skipped,
            ),  # fmt: skip
            ("GPU used", facts.gpu),
            ("Data folder", str(facts.data_dir)),
            ("Log folder", str(facts.log_dir)),
        ]


class ShortcutsDialog(QDialog):
    """Every action of the window that has a key, with the key, then the message box's keys."""

    def __init__(self, actions: Sequence[QAction], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        self.resize(460, 520)
        rows = shortcut_rows(actions)
        self.table = read_only_table(("Action", "Keys"), stretch_column=0)
        self.table.setAccessibleName("Keyboard shortcuts")
        self.table.setRowCount(len(rows))
        for row, (name, keys) in enumerate(rows):
            self.table.setItem(row, 0, QTableWidgetItem(name))
            self.table.setItem(row, 1, QTableWidgetItem(keys))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        column = QVBoxLayout(self)
        column.addWidget(self.table)
        column.addWidget(buttons)


def shortcut_rows(actions: Sequence[QAction]) -> list[tuple[str, str]]:
    """(what, keys) for each action with a shortcut, in menu order, then the input's keys."""
    rows = []
    for action in actions:
        keys = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
        if keys:
            rows.append((action.text().replace("&", "").rstrip("…"), keys))
    return rows + list(INPUT_KEYS)


def open_folder(folder: Path) -> bool:
    """Show the folder in the system's file manager (made first, so it opens even before
    anything was written there)."""
    folder.mkdir(parents=True, exist_ok=True)
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))
