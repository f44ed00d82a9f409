"""Other computers lent to this one, in the VRAM panel: the list, "Add computer…", "Remove".

It renders an `app.screen_text.lent_computers_view.LentComputersView` and reports what
the person asked for; ui.lent.lent_computers_controller checks, measures and keeps them off
the GUI thread. The dialog only gathers an address and its options: whether they lead
to a usable computer is the check's to say, in one line under the list.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.screen_text.lent_computers_view import LentComputersView
from engine.remote.lent_budget import REMOTE_SHARE
from ui.theme import error_style

COLUMNS = ("Computer", "Memory", "Budget", "Link (round trip, up / down)", "Speed")


@dataclass(frozen=True)
class ComputerToAdd:
    address: str
    budget: str  # as typed: empty, or a size such as 12GiB
    identity_file: str  # an SSH key for an ssh:// address, or empty (ssh's own choice)


class LentComputersBox(QWidget):
    add_requested = Signal(object)  # a ComputerToAdd
    remove_requested = Signal(str)  # the address
    across_toggled = Signal(bool)  # "Run models across these computers"

    def __init__(self) -> None:
        super().__init__()
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setAccessibleName("Other computers lent to this one")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.add = QPushButton("Add computer…")
        self.add.setAccessibleName("Add another computer")
        self.remove = QPushButton("Remove")
        self.remove.setAccessibleName("Forget the selected computer")
        self.busy = QLabel(wordWrap=True)
        self.error = QLabel(wordWrap=True)
        self.error.setAccessibleName("Why the computer was not added")
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note = QLabel(wordWrap=True)
        self.across = QCheckBox("Run models across these computers")
        self.across.setAccessibleName("Split the models this window loads across these computers")
        self.split = QLabel(wordWrap=True)
        self.split.setAccessibleName("How the loaded model would run across these computers")
        self.split.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        buttons = QHBoxLayout()
        buttons.addWidget(self.add)
        buttons.addWidget(self.remove)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("<b>Other computers</b>"))
        layout.addWidget(self.table)
        layout.addLayout(buttons)
        layout.addWidget(self.across)
        layout.addWidget(self.busy)
        layout.addWidget(self.error)
        layout.addWidget(self.split)
        layout.addWidget(self.note)
        self.add.clicked.connect(self._ask_for_computer)
        self.remove.clicked.connect(self._remove_selected)
        self.across.toggled.connect(self.across_toggled)
        self.table.itemSelectionChanged.connect(self._enable_remove)
        self.show_view(LentComputersView())

    def show_view(self, view: LentComputersView) -> None:
        self.table.setRowCount(len(view.rows))
        for number, row in enumerate(view.rows):
            cells = (row.address, row.memory, row.budget, row.link, row.speed)
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                self.table.setItem(number, column, item)
        self.table.setVisible(bool(view.rows))
        self._fit_rows()
        self.busy.setText(view.busy)
        self.busy.setVisible(bool(view.busy))
        self.error.setText(view.error)
        self.error.setVisible(bool(view.error))
        self.error.setStyleSheet(error_style(self.error))
        self.note.setText(view.note)
        self.across.setVisible(bool(view.rows) or view.across)  # never hide it switched on
        if self.across.isChecked() != view.across:
            with QSignalBlocker(self.across):
                self.across.setChecked(view.across)
        self.split.setText(view.split)
        self.split.setVisible(bool(view.split))
        self.add.setEnabled(not view.busy)
        self._enable_remove()

    def _fit_rows(self) -> None:
        """As tall as its rows: a list of two computers needs no scrolling, and no blank."""
        self.table.resizeRowsToContents()
        height = self.table.horizontalHeader().sizeHint().height()
        height += self.table.verticalHeader().length() + 2 * self.table.frameWidth()
        height += self.table.horizontalScrollBar().sizeHint().height()
        self.table.setFixedHeight(height)

    def selected_address(self) -> str | None:
        rows = {index.row() for index in self.table.selectedIndexes()}
        if len(rows) != 1:
            return None
        item = self.table.item(rows.pop(), 0)
        return item.text() if item is not None else None

    def _ask_for_computer(self) -> None:
        dialog = AddComputerDialog(self)
        if dialog.exec() == QDialog.DialogCode.Accepted:
            self.add_requested.emit(dialog.computer())

    def _remove_selected(self) -> None:
        address = self.selected_address()
        if address is not None:
            self.remove_requested.emit(address)

    def _enable_remove(self) -> None:
        self.remove.setEnabled(self.selected_address() is not None and self.add.isEnabled())


class AddComputerDialog(QDialog):
    """The address of a computer that runs `shardchat share`, and how to reach it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Add a computer")
        self.setMinimumWidth(480)
        self.address = QLineEdit()
        self.address.setAccessibleName("Address")
        self.address.setPlaceholderText("ssh://you@desk-pc  or  tcp://10.0.0.5:50052")
        self.budget = QLineEdit()
        self.budget.setAccessibleName("Budget")
        self.budget.setPlaceholderText(f"e.g. 12GiB (empty: {REMOTE_SHARE:.0%} of what is free)")
        self.identity = QLineEdit()
        self.identity.setAccessibleName("SSH key file")
        self.identity.setPlaceholderText("empty: your usual SSH key")
        explanation = QLabel(
            "On the other computer, turn on sharing (its Share tab, or shardchat share). "
            "Through ssh:// it is reached with your own SSH key, and needs no open port; "
            "tcp:// reaches a computer that shares on your network directly.",
            wordWrap=True,
        )
        form = QFormLayout()
        form.addRow("Address", self.address)
        form.addRow("Budget", self.budget)
        form.addRow("SSH key", self.identity)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Add")
        layout = QVBoxLayout(self)
        layout.addWidget(explanation)
        layout.addLayout(form)
        layout.addWidget(self.buttons)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.address.textChanged.connect(self._enable_add)
        self._enable_add()

    def computer(self) -> ComputerToAdd:
        return ComputerToAdd(
            self.address.text().strip(), self.budget.text().strip(), self.identity.text().strip()
        )

    def _enable_add(self) -> None:
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setEnabled(bool(self.address.text().strip()))
