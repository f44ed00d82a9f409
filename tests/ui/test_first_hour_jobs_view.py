"""The window's Jobs tab on a real job store: jobs with their progress, output a click away.

Jobs are written through the summariser's own store (app.stores.job_store); the
view reads them read-only. Opening a folder or the report goes through Qt's URL
handler, which the test takes over for file URLs (Qt's own hook, no mock).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QObject, QUrl, Slot
from PySide6.QtGui import QDesktopServices

from app.paths import app_paths
from app.screen_text.job_overview import list_jobs
from app.stores.job_store import DONE, FAILED, FileRecord, JobStore
from ui.summaries.jobs_view import NO_JOBS, PROGRESS, STATUS, JobsView
from ui.window.main_window import MainWindow


class _Opener(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.opened: list[Path] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.opened.append(Path(url.toLocalFile()))


@pytest.fixture
def opener():
    taken = _Opener()
    QDesktopServices.setUrlHandler("file", taken, "open")
    yield taken
    QDesktopServices.unsetUrlHandler("file")


def make_job(tmp_path: Path, name: str, outcomes: list[str], finished: bool) -> int:
    """A job over `name` with one file per outcome ("pending" stays pending)."""
    source, output = tmp_path / name, tmp_path / f"{name}-summaries"
    source.mkdir()
    output.mkdir()
    with JobStore() as store:
        job = store.start_or_resume(source, output, {"words": 100})
        paths = [f"doc{n}.txt" for n in range(len(outcomes))]
        store.add_files(job.id, paths)
        for path, outcome in zip(paths, outcomes, strict=True):
            if outcome != "pending":
                store.record(
                    job.id, FileRecord(path, outcome, error="x" if outcome == FAILED else None)
                )
        if finished:
            store.finish(job.id, "finished")
            (output / "report.md").write_text("# Report\n")
    return job.id


def test_jobs_are_listed_newest_first_with_progress_and_open_their_output(
    qtbot, tmp_path: Path, opener: _Opener
) -> None:
    view = JobsView()
    qtbot.addWidget(view)
    view.refresh()
    assert view.table.rowCount() == 0 and view.note.text() == NO_JOBS
    done_id = make_job(tmp_path, "letters", [DONE, DONE, FAILED], finished=True)
    running_id = make_job(tmp_path, "papers", [DONE, "pending", "pending", "pending"], False)
    view.show()  # showing the tab looks again
    assert [job.job_id for job in view.jobs] == [running_id, done_id]
    bars = [view.table.cellWidget(row, PROGRESS) for row in range(2)]
    assert [bar.text() for bar in bars] == ["1 of 4 files", "3 of 3 files · 1 failed"]
    assert [view.table.item(row, STATUS).text() for row in range(2)] == ["running", "done"]
    assert not view.open_output.isEnabled()  # nothing selected yet

    view.table.selectRow(0)
    assert view.open_output.isEnabled() and not view.open_report.isEnabled()  # no report yet
    view.table.selectRow(1)
    assert view.open_report.isEnabled()
    view.open_output.click()
    view.open_report.click()
    assert opener.opened == [
        tmp_path / "letters-summaries",
        tmp_path / "letters-summaries" / "report.md",
    ]

    with JobStore() as store:  # the running job moves on; the selection stays on its job
        store.record(running_id, FileRecord("doc1.txt", DONE))
    view.refresh()
    assert view.table.cellWidget(0, PROGRESS).text() == "2 of 4 files"
    assert view.selected() is not None and view.selected().job_id == done_id


def test_a_damaged_job_store_lists_no_jobs_and_leaves_the_file_alone(qtbot) -> None:
    path = app_paths().data_dir / "jobs.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    for junk in (b"", b"SQLite format 3\x00" + b"\xff" * 200, b"not a database at all" * 50):
        path.write_bytes(junk)
        assert list_jobs() == []
        view = JobsView()
        qtbot.addWidget(view)
        view.refresh()
        assert view.table.rowCount() == 0 and path.read_bytes() == junk


def test_tools_jobs_shows_the_jobs_tab(qtbot, tmp_path: Path) -> None:
    make_job(tmp_path, "notes", [DONE], finished=True)
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.jobs_action.trigger()
    assert window.jobs_dock.isVisible() and window.jobs_view.table.rowCount() == 1
    assert window.jobs_dock.toggleViewAction() in window.view_menu.actions()
    window.jobs_view.grab().save(str(tmp_path / "jobs.png"))
