"""The batch panel: summarise a folder beside the chat, and watch it go file by file.

It renders an `app.summaries.batch_view.BatchView` and reports what the person asks for
(a folder chosen or dropped, an output folder, Summarise, Pause, Resume,
Cancel); `ui.summaries.batch_controller` decides what that does and hands back the next
view. Only opening files (the output folder, a finished summary) happens
here, because it changes no state. The table is updated row by row, so a
report per finished file stays cheap in a folder of thousands.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.stores.job_store import FileRecord
from app.summaries.batch_view import (
    FAILED_STATE,
    FAIRNESS,
    BatchView,
    progress_text,
    shown_output_folder,
    summary_file,
)
from ui.model_drop import GgufDropFilter
from ui.theme import error_style

COLUMNS = ("File", "Status", "Tokens", "Seconds", "Note")
FILE, STATUS, TOKENS, SECONDS, NOTE = range(len(COLUMNS))
MAX_WORDS_LIMIT = 2000

W = TypeVar("W", bound=QWidget)


class BatchPanel(QWidget):
    folder_chosen = Signal(object)  # Path, from the dialog
    paths_dropped = Signal(list)  # list[Path]: whatever was dropped; the controller judges it
    output_chosen = Signal(object)  # Path
    instruction_edited = Signal(str)
    max_words_edited = Signal(object)  # int, or None for the job's default length
    start_requested = Signal()
    pause_requested = Signal()
    resume_requested = Signal()
    cancel_requested = Signal()
    notice = Signal(str)  # a one-line note the panel could not act on (no app to open a file)

    def __init__(self) -> None:
        super().__init__()
        self._view = BatchView()
        self._rows: tuple[FileRecord, ...] = ()
        self._make_controls()
        self._lay_out()
        self._connect()
        self.drop_filter = GgufDropFilter(self)  # takes any local file; folders are judged later
        for widget in (self.instruction, self.output_line):
            self.drop_filter.watch(widget)  # else a line edit would take the drop as text
        self.drop_filter.files_dropped.connect(self.paths_dropped)
        self.show_batch(self._view)

    def _make_controls(self) -> None:
        self.folder_label = _named(QLabel(wordWrap=True), "Folder to summarise")
        self.choose = _named(QPushButton("Choose folder…"), "Choose a folder to summarise")
        self.output_line = _named(QLineEdit(readOnly=True), "Output folder")
        self.change_output = _named(QPushButton("Change…"), "Change the output folder")
        self.instruction = _named(QLineEdit(), "Instruction for every summary (optional)")
        self.instruction.setPlaceholderText("Optional, e.g. “List the decisions and dates”")
        self.max_words = _named(QSpinBox(), "Longest summary, in words")
        self.max_words.setRange(0, MAX_WORDS_LIMIT)
        self.max_words.setSingleStep(10)
        self.max_words.setSpecialValueText("default")  # 0: the job's own length
        self.summarise = _named(QPushButton("Summarise"), "Summarise the folder")
        self.pause = _named(QPushButton("Pause"), "Pause the batch")
        self.resume = _named(QPushButton("Resume"), "Resume the batch")
        self.cancel = _named(QPushButton("Cancel"), "Cancel the batch")
        self.progress = _named(QProgressBar(), "Batch progress")
        self.progress.setTextVisible(True)
        self.table = _named(QTableWidget(0, len(COLUMNS)), "Files in the batch")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(FILE, QHeaderView.ResizeMode.Stretch)
        self.table.setToolTip("Double-click a done file to open its summary")
        self.open_output = _named(QPushButton("Open output folder"), "Open the output folder")
        self.fairness = _named(QLabel(FAIRNESS, wordWrap=True), "How chat and batch share")
        self.message = _named(QLabel(wordWrap=True), "Batch message")

    def _lay_out(self) -> None:
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.folder_label, stretch=1)
        folder_row.addWidget(self.choose)
        output_row = QHBoxLayout()
        output_row.addWidget(self.output_line, stretch=1)
        output_row.addWidget(self.change_output)
        form = QFormLayout()
        form.addRow("Folder", folder_row)
        form.addRow("Output", output_row)
        form.addRow("Instruction", self.instruction)
        form.addRow("Max words", self.max_words)
        buttons = QHBoxLayout()
        for button in (self.summarise, self.pause, self.resume, self.cancel):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("<b>Summarise a folder</b>"))
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.progress)
        layout.addWidget(self.message)
        layout.addWidget(self.table, stretch=1)
        layout.addWidget(self.open_output)
        layout.addWidget(self.fairness)

    def _connect(self) -> None:
        self.choose.clicked.connect(self.choose_folder)
        self.change_output.clicked.connect(self.choose_output_folder)
        self.instruction.textEdited.connect(self.instruction_edited)
        self.max_words.valueChanged.connect(lambda n: self.max_words_edited.emit(n or None))
        self.summarise.clicked.connect(self.start_requested)
        self.pause.clicked.connect(self.pause_requested)
        self.resume.clicked.connect(self.resume_requested)
        self.cancel.clicked.connect(self.cancel_requested)
        self.open_output.clicked.connect(self.open_output_folder)
        self.table.cellDoubleClicked.connect(lambda row, _column: self.open_summary(row))

    # --- rendering ---

    def show_batch(self, view: BatchView) -> None:
        self._view = view
        self.folder_label.setText(str(view.folder) if view.folder else "No folder chosen")
        output = shown_output_folder(view)
        self.output_line.setText(str(output) if output else "")
        self._show_settings(view)
        self._show_actions(view)
        self.progress.setRange(0, max(view.files_total, 1))
        self.progress.setValue(min(view.files_done, max(view.files_total, 1)))
        self.progress.setFormat(progress_text(view).replace("%", "%%"))
        self.message.setText(view.message)
        failed = view.state == FAILED_STATE
        self.message.setStyleSheet(error_style(self.message) if failed else "")
        self._show_rows(view.rows)

    def view(self) -> BatchView:
        """The view on screen (for the controller's tests and the main window's title)."""
        return self._view

    def _show_settings(self, view: BatchView) -> None:
        """Push the settings in without echoing them back as edits."""
        if self.instruction.text() != view.instruction:
            self.instruction.blockSignals(True)
            self.instruction.setText(view.instruction)
            self.instruction.blockSignals(False)
        self.max_words.blockSignals(True)
        self.max_words.setValue(view.max_words or 0)
        self.max_words.blockSignals(False)

    def _show_actions(self, view: BatchView) -> None:
        editable = view.can_change_folder
        for widget in (self.choose, self.instruction, self.max_words):
            widget.setEnabled(editable)
        self.change_output.setEnabled(editable and view.folder is not None)
        self.summarise.setEnabled(view.can_start)
        self.pause.setEnabled(view.can_pause)
        self.resume.setEnabled(view.can_resume)
        self.cancel.setEnabled(view.can_cancel)
        output = shown_output_folder(view)
        self.open_output.setEnabled(output is not None and output.is_dir())

    def _show_rows(self, rows: tuple[FileRecord, ...]) -> None:
        """Rewrite only the rows that changed; all of them when the list itself changed."""
        same_list = len(rows) == len(self._rows) and all(
            old.path == new.path for old, new in zip(self._rows, rows, strict=True)
        )
        if not same_list:
            self.table.setRowCount(len(rows))
        for index, row in enumerate(rows):
            if not same_list or self._rows[index] != row:
                for column, text in enumerate(_cells(row)):
                    self.table.setItem(index, column, QTableWidgetItem(text))
        self._rows = rows

    # --- what the person asks for ---

    def choose_folder(self) -> None:
        start = str(self._view.folder or Path.home())
        chosen = QFileDialog.getExistingDirectory(self, "Choose a folder to summarise", start)
        if chosen:
            self.folder_chosen.emit(Path(chosen))

    def choose_output_folder(self) -> None:
        start = str(shown_output_folder(self._view) or Path.home())
        chosen = QFileDialog.getExistingDirectory(self, "Choose where summaries go", start)
        if chosen:
            self.output_chosen.emit(Path(chosen))

    def open_output_folder(self) -> None:
        output = shown_output_folder(self._view)
        if output is not None:
            self._open(output)

    def open_summary(self, row: int) -> None:
        """Open a done file's summary; other rows have none yet, so nothing happens."""
        path = summary_file(self._view, row)
        if path is not None:
            self._open(path)

    def _open(self, path: Path) -> None:
        if not path.exists():
            self.notice.emit(f"{path} is not there (moved or deleted?)")
        elif not QDesktopServices.openUrl(QUrl.fromLocalFile(str(path))):
            self.notice.emit(f"no application opens {path}")


def _cells(row: FileRecord) -> tuple[str, ...]:
    tokens = f"{row.tokens_in} → {row.tokens_out}" if row.tokens_in or row.tokens_out else ""
    seconds = f"{row.seconds:.1f}" if row.seconds else ""
    return row.path, row.status, tokens, seconds, row.error or ""


def _named(widget: W, name: str) -> W:
    widget.setAccessibleName(name)
    return widget
