"""`shardchat gui` on a profiled machine queues the model's load before Qt is imported
(app.engine_host.early_engine); the window then takes that engine over. Its events, held until the
window is there, arrive in order; a message typed meanwhile is answered once."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from dataclasses import replace

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication

import ui.gui_main
from app.cli.main import main
from app.engine_host.early_engine import EarlyEngine, HeldEvents, start_engine_early
from app.engine_host.events import ModelUnloaded
from app.interpreter_sharing import START_UP_SWITCH_INTERVAL_S, SWITCH_INTERVAL_S
from app.stores.profile_store import ProfileStore
from engine.machine.hardware import probe_hardware
from tests.ui.conftest import SHORT, TIMEOUT_MS, no_gpu
from ui.desktop import Desktop
from ui.gui_main import run_desktop


def store_as_this_machines(profile) -> None:
    hardware = probe_hardware()
    with ProfileStore() as store:
        store.save(replace(profile, llama_build=hardware.llama_build))


def adopt(qtbot, desktops, model, early: EarlyEngine) -> Desktop:
    desktop = Desktop(str(model), early.load.profile, 1024, SHORT, no_gpu, early=early)
    desktops.append(desktop)
    qtbot.addWidget(desktop.window)
    desktop.start()
    return desktop


def test_an_unprofiled_machine_starts_no_engine_early(default_model_file) -> None:
    assert start_engine_early(str(default_model_file), 1024) is None  # the wizard comes first


def test_the_window_takes_over_a_load_that_finished_before_it_was_built(
    qtbot, desktops, default_model_file, recorded_profile_here
) -> None:
    store_as_this_machines(recorded_profile_here)
    early = start_engine_early(str(default_model_file), 1024)
    assert early is not None and early.load.profile is not None
    qtbot.waitUntil(lambda: early.events.held > 0, timeout=TIMEOUT_MS)  # the load's answer
    desktop = adopt(qtbot, desktops, default_model_file, early)
    assert not desktop.chat.model_ready  # the held answer comes through the event loop
    with qtbot.waitSignal(desktop.bridge.model_loaded, timeout=TIMEOUT_MS) as loaded:
        pass
    assert loaded.args[0].request_id == early.request_id and desktop.chat.model_ready
    assert "SmolLM2" in desktop.window.model_label.text()
    with qtbot.waitSignal(desktop.bridge.reply_finished, timeout=TIMEOUT_MS) as finished:
        qtbot.keyClicks(desktop.window.input, "Say yes.")
        qtbot.keyClick(desktop.window.input, Qt.Key.Key_Return)
    said = [m.content for m in desktop.store.messages(desktop.chat.conversation_id)]
    assert said == ["Say yes.", finished.args[0].text] and finished.args[0].text.strip()


def test_a_message_typed_before_the_early_load_ends_is_answered_once(
    qtbot, desktops, default_model_file, recorded_profile_here
) -> None:
    store_as_this_machines(recorded_profile_here)
    sys.setswitchinterval(0.005)  # Python's default
    gc.disable()  # as `shardchat gui` starts
    early = start_engine_early(str(default_model_file), 1024)
    interval = sys.getswitchinterval()
    assert early is not None
    desktop = adopt(qtbot, desktops, default_model_file, early)  # closed after the test
    # the load's log lines, one call into Python each, get the interpreter from the imports
    assert interval == pytest.approx(START_UP_SWITCH_INTERVAL_S)
    assert gc.isenabled()  # the window is shown: cycles are collected again
    with qtbot.waitSignal(desktop.bridge.reply_finished, timeout=TIMEOUT_MS) as finished:
        qtbot.keyClicks(desktop.window.input, "Say yes.")
        qtbot.keyClick(desktop.window.input, Qt.Key.Key_Return)
        assert not desktop.chat.model_ready  # held: no event has run yet
    said = [m.content for m in desktop.store.messages(desktop.chat.conversation_id)]
    assert said == ["Say yes.", finished.args[0].text] and finished.args[0].text.strip()


def test_held_events_pass_on_in_order_while_more_arrive() -> None:
    """Events sent from another thread while the held ones are passed on wait for them."""
    received: list[int] = []
    held = HeldEvents()
    sent = threading.Event()
    count = 2000

    def send() -> None:
        for number in range(count):
            held(ModelUnloaded(number, None))
            if number == count // 2:
                sent.set()

    sender = threading.Thread(target=send)
    sender.start()
    sent.wait()
    held.pass_to(lambda event: received.append(event.request_id))
    sender.join()
    assert received == list(range(count)) and held.held == 0
    held(ModelUnloaded(count, None))  # passed straight on now
    assert received[-1] == count and held.held == 0


@pytest.fixture(autouse=True)
def switch_interval_kept():
    """The early engine and the window set the process's switch interval and turn the
    garbage collector back on, and the window sets asyncio's loop (qasync's, closed when
    the window closes): the test process gets its own back."""
    kept = sys.getswitchinterval()
    yield
    sys.setswitchinterval(kept)
    gc.enable()  # `shardchat gui` holds the collector off until its window shows
    asyncio.set_event_loop(None)


def test_shardchat_gui_queues_the_load_before_the_window(
    monkeypatch, default_model_file, recorded_profile_here
) -> None:
    store_as_this_machines(recorded_profile_here)
    seen: dict[str, object] = {}

    def run_gui(model_path: str, n_ctx: int, model_chosen: bool, early: EarlyEngine) -> int:
        seen.update(early=early, n_ctx=n_ctx, collecting=gc.isenabled())
        early.engine.shutdown()
        return 0

    monkeypatch.setattr(ui.gui_main, "run_gui", run_gui)
    assert main(["gui", "--model", str(default_model_file), "--ctx", "512"]) == 0
    early = seen["early"]
    assert isinstance(early, EarlyEngine) and early.load.n_ctx == seen["n_ctx"] == 512
    assert seen["collecting"] is False and gc.isenabled()  # held off until the window shows


def test_the_running_window_hands_the_interpreter_over_within_a_tenth_of_a_ms(
    qtbot, desktops, open_desktop, default_model_file
) -> None:
    """A load beside the GUI thread's Python took 26x as long at Python's default."""
    sys.setswitchinterval(0.005)
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    app = QApplication.instance()
    quit_now = lambda: desktop.window.close() or app.quit()  # noqa: E731
    # queued from the loop's first pass: after what run_desktop queues before it runs
    QTimer.singleShot(0, lambda: QTimer.singleShot(0, quit_now))
    assert run_desktop(app, desktop, exit_when_ready=False) == 0
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
