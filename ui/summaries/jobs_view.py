"""The window's Jobs tab: every folder summary, with its progress, and its output a click away.

It renders `app.screen_text.job_overview.list_jobs` (a read-only look at the job store) and
is told to look again when a job moves (the desktop connects the engine's job
events to `refresh`) and when the tab is shown; it keeps no state of its own
beyond the rows drawn. "Open output" shows the job's output folder, "Open
report" its report.md, in the system's own applications.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices, QShowEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.screen_text.job_overview import JobOverview, list_jobs
from ui.tables import read_only_table

COLUMNS = ("Folder", "Progress", "Status")
FOLDER, PROGRESS, STATUS = range(len(COLUMNS))
NO_JOBS = "No folder summaries yet: Tools → Summarise a folder starts one."
STATUS_WORDS = {"running": "running", "finished": "done", "cancelled": "paused (resumable)"}


class JobsView(QWidget):
    def __init__(self, store_path: Path | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._store_path = store_path
        self.jobs: list[JobOverview] = []
        self.table = read_only_table(COLUMNS, stretch_column=FOLDER)
        self.table.setAccessibleName("Jobs")
        self.note = QLabel(NO_JOBS, wordWrap=True)
        self.note.setAccessibleName("Jobs status")
        self.open_output = QPushButton("Open output")
        self.open_output.setAccessibleName("Open the job's output folder")
        self.open_report = QPushButton("Open report")
        self.open_report.setAccessibleName("Open the job's report")
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setAccessibleName("Refresh the jobs")
        buttons = QHBoxLayout()
        for button in (self.open_output, self.open_report):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(self.refresh_button)
        column = QVBoxLayout(self)
        column.addWidget(self.table, stretch=1)
        column.addWidget(self.note)
        column.addLayout(buttons)
        self.table.itemSelectionChanged.connect(self._enable_buttons)
        self.table.doubleClicked.connect(lambda _index: self.open_selected_output())
        self.open_output.clicked.connect(self.open_selected_output)
        self.open_report.clicked.connect(self.open_selected_report)
        self.refresh_button.clicked.connect(self.refresh)
        self._enable_buttons()

    def refresh(self) -> None:
        """Read the jobs again and redraw them, keeping the selected job selected."""
        chosen = self.selected()
        self.jobs = list_jobs(self._store_path)
        self.table.setRowCount(len(self.jobs))
        for row, job in enumerate(self.jobs):
            self._draw(row, job)
        self.note.setVisible(not self.jobs)
        if chosen is not None:
            ids = [job.job_id for job in self.jobs]
            if chosen.job_id in ids:
                self.table.selectRow(ids.index(chosen.job_id))
        self._enable_buttons()

    def selected(self) -> JobOverview | None:
        rows = {index.row() for index in self.table.selectedIndexes()}
        return self.jobs[min(rows)] if rows and min(rows) < len(self.jobs) else None

    def open_selected_output(self) -> bool:
        job = self.selected()
        return job is not None and _open(job.output_folder)

    def open_selected_report(self) -> bool:
        job = self.selected()
        return job is not None and job.report is not None and _open(job.report)

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        self.refresh()

    def _draw(self, row: int, job: JobOverview) -> None:
        folder = QTableWidgetItem(job.input_folder.name or str(job.input_folder))
        folder.setToolTip(f"{job.input_folder}\n→ {job.output_folder}\nstarted {job.created_at}")
        self.table.setItem(row, FOLDER, folder)
        bar = self.table.cellWidget(row, PROGRESS)
        if not isinstance(bar, QProgressBar):  # kept across refreshes: no flicker, no leftovers
            bar = QProgressBar()
            self.table.setCellWidget(row, PROGRESS, bar)
        bar.setRange(0, max(1, job.files))
        bar.setValue(job.settled)
        bar.setFormat(job.progress_text())
        bar.setAccessibleName(f"Progress of {folder.text()}")
        item = QTableWidgetItem(STATUS_WORDS.get(job.status, job.status))
        item.setData(Qt.ItemDataRole.UserRole, job.job_id)
        self.table.setItem(row, STATUS, item)

    def _enable_buttons(self) -> None:
        job = self.selected()
        self.open_output.setEnabled(job is not None and job.output_folder.is_dir())
        self.open_report.setEnabled(job is not None and job.report is not None)


def _open(path: Path) -> bool:
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))
