"""Engine events reach Qt slots on the GUI thread, and the GUI thread never waits for the engine."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QThread, QTimer
from PySide6.QtWidgets import QApplication, QLabel

from app.engine_host.events import ModelLoaded, ReplyFinished, RequestFailed
from app.engine_host.worker import EngineWorker
from engine.generation.sampling import GREEDY
from engine.llama.load_params import LoadParams
from ui.engine_bridge import EngineBridge

TIMEOUT_MS = 60_000


def test_events_arrive_as_signals_on_the_gui_thread(qtbot, default_model_file: Path) -> None:
    bridge = EngineBridge()
    label = QLabel()
    qtbot.addWidget(label)
    slot_threads: set[object] = set()

    def show_piece(_request_id: int, text: str) -> None:
        slot_threads.add(QThread.currentThread())
        label.setText(label.text() + text)

    bridge.token_streamed.connect(show_piece)
    worker = EngineWorker(bridge).start()
    try:
        with qtbot.waitSignal(bridge.model_loaded, timeout=TIMEOUT_MS) as loaded:
            worker.load_model(LoadParams(str(default_model_file), n_ctx=512, n_threads=2))
        assert isinstance(loaded.args[0], ModelLoaded)
        with qtbot.waitSignal(bridge.reply_finished, timeout=TIMEOUT_MS) as finished:
            worker.send_message("Say hello", GREEDY.with_changes(max_tokens=16))
        reply = finished.args[0]
        assert isinstance(reply, ReplyFinished)
        assert label.text() == reply.text != ""
        assert slot_threads == {QApplication.instance().thread()}
    finally:
        worker.shutdown()


def test_gui_thread_keeps_running_while_the_engine_works(qtbot, default_model_file: Path) -> None:
    bridge = EngineBridge()
    ticks: list[float] = []
    timer = QTimer()
    timer.setInterval(20)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    worker = EngineWorker(bridge).start()
    try:
        with qtbot.waitSignal(bridge.model_loaded, timeout=TIMEOUT_MS):
            worker.load_model(LoadParams(str(default_model_file), n_ctx=512, n_threads=2))
        with qtbot.waitSignal(bridge.reply_finished, timeout=TIMEOUT_MS) as finished:
            started = time.perf_counter()
            worker.send_message("Tell me a story.", GREEDY.with_changes(max_tokens=64))
            submit_time = time.perf_counter() - started
            timer.start()
        timer.stop()
        assert submit_time < 0.05  # submitting only queues the request
        assert finished.args[0].stats.generated_tokens > 8
        assert len(ticks) >= 3  # the event loop kept turning while tokens were decoded
    finally:
        worker.shutdown()


def test_errors_arrive_as_request_failed(qtbot, tmp_path: Path) -> None:
    bridge = EngineBridge()
    seen: list[object] = []
    bridge.any_event.connect(seen.append)
    worker = EngineWorker(bridge).start()
    try:
        with qtbot.waitSignal(bridge.request_failed, timeout=TIMEOUT_MS) as failed:
            worker.load_model(LoadParams(str(tmp_path / "missing.gguf")))
        assert isinstance(failed.args[0], RequestFailed) and failed.args[0].bad_input
        assert seen == [failed.args[0]]
    finally:
        worker.shutdown()
