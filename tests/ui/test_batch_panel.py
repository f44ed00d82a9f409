"""The batch panel: plain views rendered, folders chosen and dropped, and real jobs on the default
model — run, paused and resumed, and sharing the worker with a chat reply."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSpinBox,
    QFileDialog,
    QHeaderView,
    QLineEdit,
    QProgressBar,
    QWidget,
)

from app.engine_host.events import JobFinished, JobProgressed, ReplyFinished
from app.engine_host.worker import EngineWorker
from app.stores.job_store import DONE, PENDING, SKIPPED, FileRecord
from app.summaries.batch_view import (
    FAILED_STATE,
    FAIRNESS,
    FINISHED,
    IDLE,
    PAUSED,
    RUNNING,
    BatchView,
    cancelled,
    eta_text,
    paused,
    progress_text,
    started,
    with_outcome,
    with_progress,
)
from app.summaries.summary_job import JobOutcome, JobProgress
from app.summaries.summary_output import REPORT_MD, summary_path
from engine.generation.sampling import GREEDY
from engine.llama.load_params import LoadParams
from ui.engine_bridge import EngineBridge
from ui.summaries.batch_controller import BatchController
from ui.summaries.batch_panel import FILE, NOTE, STATUS, TOKENS, BatchPanel

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_MS = 300_000  # the jobs take seconds; a machine shared with other runs can be slow
SENTENCES = (
    "The river town held its spring market on the first Saturday of April.",
    "Farmers brought apples, cheese and wool; the baker sold out by noon.",
    "In the evening the council met and agreed to repair the old stone bridge.",
)


def write_documents(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True)
    for index in range(count):
        text = f"Report {index}. " + " ".join(SENTENCES[(index + k) % 3] for k in range(3))
        (folder / f"report-{index:02d}.txt").write_text(text + "\n", encoding="utf-8")
    return folder


def file_drop(*paths: Path) -> QMimeData:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path)) for path in paths])
    return mime


def rows_of(panel: BatchPanel) -> list[tuple[str, str]]:
    table = panel.table
    return [
        (table.item(row, FILE).text(), table.item(row, STATUS).text())
        for row in range(table.rowCount())
    ]


def enabled(panel: BatchPanel) -> set[str]:
    buttons = (panel.summarise, panel.pause, panel.resume, panel.cancel)
    return {button.text() for button in buttons if button.isEnabled()}


@pytest.fixture
def idle_engine(qtbot):
    """A worker with no model: enough for choosing folders, and to refuse a job."""
    bridge = EngineBridge()
    worker = EngineWorker(bridge).start()
    yield worker, bridge
    worker.shutdown()


@pytest.fixture
def engine(qtbot, default_model_file: Path):
    bridge = EngineBridge()
    worker = EngineWorker(bridge).start()
    with qtbot.waitSignal(bridge.model_loaded, timeout=TIMEOUT_MS):
        worker.load_model(LoadParams(str(default_model_file), n_ctx=2048, n_threads=2))
    yield worker, bridge
    worker.shutdown()


def open_panel(qtbot, worker, bridge, parallel: int | None = None):
    panel = BatchPanel()
    qtbot.addWidget(panel)
    controller = BatchController(panel, worker, bridge, parallel)
    return panel, controller


# --- the view, without Qt ---


def test_progress_reads_like_a_sentence_and_time_left_is_rounded() -> None:
    view = BatchView(
        folder=Path("/docs"), files_done=12, files_total=40, tokens_per_s=85.4,
        eta_text=eta_text(130), state=RUNNING,
    )  # fmt: skip
    assert progress_text(view) == "12 of 40 files · 85.4 tok/s · about 2 min left"
    assert progress_text(replace(view, state=PAUSED)) == "12 of 40 files · paused"
    with_four = with_progress(view, JobProgress(12, 40, "a.txt", 900, 85.4, 130.0, parallel=4))
    assert (
        progress_text(with_four) == "12 of 40 files · 4 at a time · 85.4 tok/s · about 2 min left"
    )
    assert progress_text(BatchView()) == "Choose or drop a folder to summarise"
    assert [eta_text(s) for s in (None, 20, 3 * 3600 + 600)] == [
        "",
        "under a minute left",
        "about 3 h 10 min left",
    ]


def test_a_job_ending_after_pause_stays_paused_and_after_cancel_goes_idle() -> None:
    rows = (FileRecord("a.txt", PENDING), FileRecord("b.txt", PENDING))
    running = started(BatchView(folder=Path("/docs"), rows=rows, files_total=2))
    a_done = FileRecord("a.txt", DONE, tokens_in=90, tokens_out=30, seconds=1.0)
    moved = with_progress(running, JobProgress(1, 2, "b.txt", 30, 15.0, 4.0, a_done))
    assert moved.rows == (a_done, rows[1]) and moved.eta_text == "under a minute left"
    ended = JobOutcome(Path("/docs-summaries"), [rows[1], a_done], True, False, 2.0)
    after_pause = with_outcome(paused(moved), ended)
    assert after_pause.state == PAUSED and after_pause.can_resume
    assert after_pause.message == "Paused: 1 of 2 files done; Resume carries on where it stopped."
    assert after_pause.rows == (a_done, rows[1])  # in the scan's order, not the store's
    after_cancel = with_outcome(cancelled(moved), ended)
    assert after_cancel.state == IDLE and after_cancel.can_start and not after_cancel.can_resume
    finished = with_outcome(moved, replace(ended, records=[a_done, a_done], cancelled=False))
    assert finished.state == FINISHED and finished.message == "Done in 2 s: 2 summarised"
    assert [r.status for r in started(finished).rows] == [PENDING, PENDING]  # a new run redoes


# --- the panel renders plain views ---


def test_the_panel_renders_each_state_from_a_plain_view(qtbot, tmp_path: Path) -> None:
    panel = BatchPanel()
    qtbot.addWidget(panel)
    rows = (
        FileRecord("a.txt", DONE, tokens_in=80, tokens_out=20, seconds=1.5),
        FileRecord("b.txt", PENDING),
        FileRecord("pipe", SKIPPED, error="not a regular file"),
    )
    idle = BatchView(folder=tmp_path / "docs", rows=rows, files_done=2, files_total=3)
    panel.show_batch(idle)
    assert enabled(panel) == {"Summarise"} and panel.choose.isEnabled()
    assert panel.output_line.text() == str(tmp_path / "docs-summaries")
    assert rows_of(panel) == [("a.txt", "done"), ("b.txt", "pending"), ("pipe", "skipped")]
    assert panel.table.item(0, TOKENS).text() == "80 → 20"
    assert panel.table.item(2, NOTE).text() == "not a regular file"
    assert not panel.open_output.isEnabled()  # nothing written yet
    assert panel.fairness.text() == FAIRNESS

    running = replace(idle, state=RUNNING, tokens_per_s=42, eta_text=eta_text(30))
    panel.show_batch(running)
    assert enabled(panel) == {"Pause", "Cancel"}
    assert not panel.choose.isEnabled() and not panel.max_words.isEnabled()
    assert panel.progress.text() == "2 of 3 files · 42.0 tok/s · under a minute left"
    assert (panel.progress.value(), panel.progress.maximum()) == (2, 3)

    panel.show_batch(replace(running, state=PAUSED))
    assert enabled(panel) == {"Resume", "Cancel"}

    (tmp_path / "docs-summaries").mkdir()
    panel.show_batch(replace(idle, state=FINISHED, message="Done in 3 s: 2 summarised"))
    assert enabled(panel) == {"Summarise"} and panel.open_output.isEnabled()
    assert panel.message.text() == "Done in 3 s: 2 summarised"

    panel.show_batch(replace(idle, state=FAILED_STATE, message="no model is loaded"))
    assert enabled(panel) == {"Summarise"} and "b00020" in panel.message.styleSheet()


def test_a_finished_file_rewrites_only_its_own_row(qtbot, tmp_path: Path) -> None:
    panel = BatchPanel()
    qtbot.addWidget(panel)
    rows = tuple(FileRecord(f"{name}.txt", PENDING) for name in "abc")
    view = BatchView(folder=tmp_path, rows=rows, files_total=3, state=RUNNING)
    panel.show_batch(view)
    untouched = panel.table.item(0, STATUS)
    panel.show_batch(replace(view, rows=(rows[0], FileRecord("b.txt", DONE, seconds=2), rows[2])))
    assert panel.table.item(0, STATUS) is untouched
    assert rows_of(panel)[1] == ("b.txt", "done")


def test_every_control_has_a_name_a_screen_reader_can_say(qtbot) -> None:
    panel = BatchPanel()
    qtbot.addWidget(panel)
    kinds = (QAbstractButton, QAbstractItemView, QAbstractSpinBox, QLineEdit, QProgressBar)
    controls = [  # header views and a spin box's line edit are Qt's own parts
        w for w in panel.findChildren(QWidget)
        if isinstance(w, kinds) and not w.objectName().startswith("qt_")
        and not isinstance(w, QHeaderView) and not isinstance(w.parent(), QAbstractSpinBox)
    ]  # fmt: skip
    assert len(controls) >= 12
    assert [type(w).__name__ for w in controls if not w.accessibleName()] == []


def test_the_panel_does_not_pull_in_llama_cpp() -> None:
    script = "import sys, ui.summaries.batch_panel; print('llama_cpp' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# --- choosing and dropping folders ---


def test_choosing_a_folder_lists_its_files_as_pending(
    qtbot, idle_engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_documents(tmp_path / "docs", 2)
    (folder / "notes").mkdir()
    (folder / "notes" / "Minutes.md").write_text("# Minutes\n", encoding="utf-8")
    os.symlink(tmp_path / "gone.txt", folder / "link.txt")
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *_args: str(folder))
    panel, controller = open_panel(qtbot, *idle_engine)
    assert enabled(panel) == set()
    qtbot.mouseClick(panel.choose, Qt.MouseButton.LeftButton)
    assert rows_of(panel) == [
        ("link.txt", "skipped"),
        ("notes/Minutes.md", "pending"),
        ("report-00.txt", "pending"),
        ("report-01.txt", "pending"),
    ]
    assert panel.table.item(0, NOTE).text() == "broken symlink"
    assert panel.output_line.text() == str(tmp_path / "docs-summaries")
    assert panel.progress.text() == "1 of 4 files"
    assert panel.message.text() == "3 documents found, 1 skipped"
    assert enabled(panel) == {"Summarise"} and controller.view.state == IDLE
    assert not (tmp_path / "docs-summaries").exists()  # choosing writes nothing

    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *_args: str(elsewhere))
    qtbot.mouseClick(panel.change_output, Qt.MouseButton.LeftButton)
    assert panel.output_line.text() == str(elsewhere) and controller.output_folder() == elsewhere
    assert len(rows_of(panel)) == 4  # the files stay listed


def test_dropping_a_file_or_two_folders_says_why_and_changes_nothing(
    qtbot, idle_engine, tmp_path: Path
) -> None:
    folder = write_documents(tmp_path / "docs", 2)
    other = write_documents(tmp_path / "other", 1)
    panel, controller = open_panel(qtbot, *idle_engine)
    assert panel.drop_filter.handle_drop(file_drop(folder))
    before = controller.view
    assert before.folder == folder and len(before.rows) == 2

    panel.drop_filter.handle_drop(file_drop(folder / "report-00.txt"))
    assert panel.message.text() == "report-00.txt is not a folder; drop the folder that holds it"
    assert replace(controller.view, message="") == replace(before, message="")
    assert rows_of(panel) == [("report-00.txt", "pending"), ("report-01.txt", "pending")]

    panel.drop_filter.handle_drop(file_drop(folder, other))
    assert panel.message.text() == "drop one folder at a time, not 2 items"
    assert controller.view.folder == folder and panel.folder_label.text() == str(folder)


def test_summarising_without_a_model_fails_with_one_line(qtbot, idle_engine, tmp_path: Path):
    panel, controller = open_panel(qtbot, *idle_engine)
    controller.choose_folder(write_documents(tmp_path / "docs", 1))
    qtbot.mouseClick(panel.summarise, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: controller.view.state == FAILED_STATE, timeout=TIMEOUT_MS)
    assert panel.message.text() == "The batch could not run: no model is loaded; load one first"
    assert enabled(panel) == {"Summarise"} and controller.request_id is None


# --- real jobs on the default model ---


def test_a_folder_is_summarised_with_progress_and_each_summary_opens(
    qtbot, engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[QUrl] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
    folder = write_documents(tmp_path / "docs", 3)
    panel, controller = open_panel(qtbot, *engine)
    panel.drop_filter.handle_drop(file_drop(folder))
    panel.max_words.setValue(20)
    qtbot.keyClicks(panel.instruction, "Summarise in {max_words} words, naming the town.")
    seen: list[tuple[str, int, str]] = []
    controller.view_changed.connect(lambda v: seen.append((v.state, v.files_done, v.eta_text)))
    qtbot.mouseClick(panel.summarise, Qt.MouseButton.LeftButton)
    assert not panel.instruction.isEnabled()
    qtbot.waitUntil(lambda: controller.view.state == FINISHED, timeout=TIMEOUT_MS)

    assert [done for state, done, _ in seen if state == RUNNING][-1] == 3
    assert any(state == RUNNING and 0 < done < 3 and eta for state, done, eta in seen)
    assert rows_of(panel) == [(f"report-0{i}.txt", "done") for i in range(3)]
    assert all("→" in panel.table.item(row, TOKENS).text() for row in range(3))
    assert panel.progress.text() == "3 of 3 files · finished"
    assert panel.message.text().endswith(": 3 summarised")
    output = tmp_path / "docs-summaries"
    summaries = [summary_path(output, f"report-0{i}.txt") for i in range(3)]
    assert all(path.read_text().startswith("# report-") for path in summaries)
    assert (output / REPORT_MD).exists()

    panel.show()
    qtbot.waitExposed(panel)
    table, left = panel.table, Qt.MouseButton.LeftButton
    where = table.visualItemRect(table.item(1, FILE)).center()
    qtbot.mouseClick(table.viewport(), left, pos=where)  # Qt's double click: press, release,
    qtbot.mouseDClick(table.viewport(), left, pos=where)  # then the second press
    qtbot.mouseClick(panel.open_output, Qt.MouseButton.LeftButton)
    assert [url.toLocalFile() for url in opened] == [str(summaries[1]), str(output)]


def test_pause_keeps_what_was_written_and_resume_finishes_the_rest(
    qtbot, engine, tmp_path: Path
) -> None:
    folder = write_documents(tmp_path / "docs", 8)
    panel, controller = open_panel(qtbot, *engine, parallel=2)
    controller.choose_folder(folder)
    panel.max_words.setValue(10)
    first_done = qtbot.waitSignal(
        engine[1].job_progressed, timeout=TIMEOUT_MS,
        check_params_cb=lambda event: event.progress.finished is not None,
    )  # fmt: skip
    with first_done:
        qtbot.mouseClick(panel.summarise, Qt.MouseButton.LeftButton)
    with qtbot.waitSignal(engine[1].job_finished, timeout=TIMEOUT_MS) as stopped:
        qtbot.mouseClick(panel.pause, Qt.MouseButton.LeftButton)
        assert controller.view.state == PAUSED and enabled(panel) == {"Resume", "Cancel"}
    assert stopped.args[0].outcome.cancelled
    statuses = dict(rows_of(panel))
    done = [path for path, status in statuses.items() if status == "done"]
    assert 1 <= len(done) < 8 and "pending" in statuses.values()
    assert panel.message.text().startswith(f"Paused: {len(done)} of 8 files done")
    output = tmp_path / "docs-summaries"
    written = {path: summary_path(output, path).stat().st_mtime_ns for path in done}

    qtbot.mouseClick(panel.resume, Qt.MouseButton.LeftButton)
    assert controller.view.state == RUNNING
    qtbot.waitUntil(lambda: controller.view.state == FINISHED, timeout=TIMEOUT_MS)
    assert set(dict(rows_of(panel)).values()) == {"done"}
    assert all(summary_path(output, f"report-{i:02d}.txt").exists() for i in range(8))
    assert {path: summary_path(output, path).stat().st_mtime_ns for path in done} == written


def test_a_chat_reply_is_served_while_the_batch_runs(qtbot, engine, tmp_path: Path) -> None:
    worker, bridge = engine
    panel, controller = open_panel(qtbot, worker, bridge, parallel=2)
    controller.choose_folder(write_documents(tmp_path / "docs", 4))  # 2 in flight, 2 waiting
    panel.max_words.setValue(10)
    order: list[tuple[object, int]] = []
    bridge.any_event.connect(lambda event: order.append((event, controller.view.files_done)))
    chat: list[int] = []

    def ask_once(event: JobProgressed) -> None:
        """Runs on the worker thread, inside the job's report: the job is surely still on."""
        if not chat:
            chat.append(worker.send_message("Say hello.", GREEDY.with_changes(max_tokens=8)))

    bridge.job_progressed.connect(ask_once, Qt.ConnectionType.DirectConnection)
    qtbot.mouseClick(panel.summarise, Qt.MouseButton.LeftButton)
    replied = lambda: any(isinstance(event, ReplyFinished) for event, _ in order)  # noqa: E731
    qtbot.waitUntil(lambda: controller.view.state == FINISHED and replied(), timeout=TIMEOUT_MS)

    events = [event for event, _ in order]
    reply = next(i for i, e in enumerate(events) if isinstance(e, ReplyFinished))
    job_end = next(i for i, e in enumerate(events) if isinstance(e, JobFinished))
    assert events[reply].request_id == chat[0] and events[reply].text
    assert reply < job_end
    assert any(isinstance(e, JobProgressed) for e in events[reply:job_end])  # the job went on
    assert order[reply][1] < 4  # files were still waiting when the reply came
    assert all(status == "done" for _, status in rows_of(panel))
