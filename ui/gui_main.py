"""Start the desktop app: the window, the engine worker, the history, one event loop.

The Qt event loop is driven by qasync, so panels can use asyncio (timers, file
work) on the GUI thread without blocking it.

On a machine profiled already, `shardchat gui` has started the engine with the model's
load queued before Qt was imported (app.engine_host.early_engine): the window takes it over, and
the load's C part runs while Qt is imported and the window built. On a first launch,
probing the hardware (25 ms here, 0.14 s with lavapipe's Vulkan driver to start; more
with GPU drivers to ask) and reading the built-in model's inventory (25-35 ms) run on a
thread while a Qt event loop keeps spinning;
the wizard waits only for the probe, the window for both, and its own read of the
built-in model then comes from `read_inventory`'s cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import qasync
from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtWidgets import QApplication, QDialog

from app.engine_host.early_engine import EarlyEngine
from app.interpreter_sharing import share_the_interpreter_quickly
from app.model_lifecycle.load_planning import stored_profile
from app.profiling_job import needs_profiling
from app.start_up_gc import collect_again
from app.stop_signals import exit_now
from engine.errors import BadInputError
from engine.machine.hardware import probe_hardware
from engine.model.default_model import default_model_path
from engine.model.inventory import read_inventory
from ui.desktop import Desktop, remember_default_model
from ui.theme import ThemeManager
from ui.thread_bridge import GuiRelay

EXIT_WHEN_READY_ENV = "SHARDCHAT_EXIT_WHEN_READY"  # see _quit_when_loaded
# with it, for an installer check on a machine with no screen (the Windows tier under Wine):
# a message the window sends once its model is loaded, and where it saves its picture
READY_MESSAGE_ENV = "SHARDCHAT_READY_MESSAGE"
READY_SCREENSHOT_ENV = "SHARDCHAT_READY_SCREENSHOT"
OUR_THREADS = ("shardchat-engine", "shardchat-profiling")  # the threads that run llama.cpp
log = logging.getLogger(__name__)

T = TypeVar("T")


def run_gui(
    model_path: str, n_ctx: int = 4096, model_chosen: bool = False, early: EarlyEngine | None = None
) -> int:
    """Open the window on `model_path` and run until it is closed; returns the exit code.

    `early`: the engine, started with the model's load queued before Qt was imported
    (a machine profiled already). Without it, on a machine never profiled, the
    first-launch wizard comes first; the model it chooses is used unless one was named
    on the command line (`model_chosen`).
    """
    app = QApplication.instance() or QApplication(sys.argv[:1])
    if not isinstance(app, QApplication):  # widgets cannot run under a bare QCoreApplication
        raise RuntimeError("the desktop app needs a QApplication, not a QCoreApplication")
    app.setApplicationName("ShardChat")
    app.setDesktopFileName("shardchat")
    theme = ThemeManager(parent=app)
    theme.apply(app)  # before the wizard, so it too follows the system's light or dark
    exit_when_ready = os.environ.get(EXIT_WHEN_READY_ENV) == "1"
    if early is not None:
        desktop = Desktop(model_path, early.load.profile, n_ctx, theme=theme, early=early)
        return run_desktop(app, desktop.start(), exit_when_ready)
    collect_again()  # a first launch: the wizard may profile the machine for minutes
    start_up = ThreadPoolExecutor(max_workers=1, thread_name_prefix="start-up")
    probed = start_up.submit(probe_hardware)
    builtin_read = start_up.submit(read_builtin_model)
    start_up.shutdown(wait=False)  # both still run, in that order
    hardware = wait_spinning(probed)
    wizard_choice: str | None = None
    suggested_download: tuple[str, str] | None = None  # a Hub model the wizard suggested
    if needs_profiling(hardware):
        from ui.profiling.profile_wizard import (
            ProfileWizard,  # a first launch only: its pages, the Hub
        )

        wizard = ProfileWizard(hardware)
        if exit_when_ready:

            def skip_wizard() -> None:
                _say_ready("wizard shown")
                wizard.reject()

            QTimer.singleShot(0, skip_wizard)
        if wizard.exec() == QDialog.DialogCode.Accepted and not model_chosen:
            wizard_choice = wizard.chosen_model() or model_path
        suggested_download = wizard.download_choice
    wait_spinning(builtin_read)  # the model list, from here on, describes it
    if wizard_choice is not None:
        model_path = remember_default_model(wizard_choice)
    desktop = Desktop(model_path, stored_profile(), n_ctx, theme=theme).start()
    if suggested_download is not None:
        desktop.download_suggested(*suggested_download)
    return run_desktop(app, desktop, exit_when_ready)


def run_desktop(app: QApplication, desktop: Desktop, exit_when_ready: bool) -> int:
    """Run the started desktop's event loop (asyncio's too) until the window is closed."""
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    QTimer.singleShot(0, share_the_interpreter_quickly)  # once the window's first events ran
    exit_code = [0]
    if exit_when_ready:
        _quit_when_loaded(app, desktop, exit_code)
    closed = asyncio.Event()
    app.aboutToQuit.connect(closed.set)
    try:
        with loop:
            loop.run_until_complete(closed.wait())
    finally:
        desktop.close()
    leave_if_llama_still_runs(exit_code[0])
    return exit_code[0]


def leave_if_llama_still_runs(exit_code: int) -> None:
    """End the process now if a thread of ours may still be inside llama.cpp.

    Closing the window cancels a reply, a job or a profiling run and waits for the
    engine a while; a long prompt step or a profiling step can outlast that wait.
    Python's shutdown would then free models under the thread still using them
    (SIGSEGV, SIGABRT). Everything worth keeping is saved by now (the chat store
    and the other stores are closed), so the process ends without finalisers.
    """
    still_running = [t.name for t in threading.enumerate() if t.name.startswith(OUR_THREADS)]
    if still_running:
        log.warning("leaving while %s still run(s)", ", ".join(still_running))
        logging.shutdown()
        exit_now(exit_code)


def wait_spinning(future: Future[T]) -> T:
    """The future's result (or its exception), with a Qt event loop running on this thread
    until it is known, so the app keeps answering the system and repainting meanwhile.

    The worker's "done" reaches the loop through a relay (ui.thread_bridge): posted as an
    event, it is seen by the loop even when the work ends before the loop has started.
    """
    if not future.done():
        relay, loop = GuiRelay(), QEventLoop()
        future.add_done_callback(lambda _future: relay.post(lambda _none: loop.quit()))
        loop.exec()
    return future.result()


def read_builtin_model() -> None:
    """On the start-up thread: fill `read_inventory`'s cache with the built-in model, which
    the window's model list reads on the GUI thread (a missing one is reported there)."""
    with contextlib.suppress(BadInputError):
        read_inventory(default_model_path())


def _say_ready(what: str) -> None:
    print(f"shardchat: ready: {what}", flush=True)


def _quit_when_loaded(app: QApplication, desktop: Desktop, exit_code: list[int]) -> None:
    """SHARDCHAT_EXIT_WHEN_READY=1 (start-up timing, installer checks): the wizard, if it
    opens, is skipped; the app says when the window is open (shown, its first events done,
    the model maybe still loading), and once it is shown with its model loaded it says so
    and quits (exit 1 if the load fails). With SHARDCHAT_READY_MESSAGE it first sends that
    message as a user would and waits for the whole reply; SHARDCHAT_READY_SCREENSHOT
    names a PNG file for the window's picture, saved just before it quits."""

    said_open: list[bool] = []

    def opened() -> None:
        if desktop.window.isVisible() and not said_open:
            said_open.append(True)
            _say_ready("window open")

    message = os.environ.get(READY_MESSAGE_ENV, "")
    screenshot = os.environ.get(READY_SCREENSHOT_ENV, "")

    def quit_soon() -> None:
        """Leave the event loop from the loop itself, never inside the signal that asked
        (the engine's held events reach `loaded` under their lock:
        app.engine_host.early_engine), and with exit(), not quit(): quit() first asks every
        window to close, which Qt under Wine's offscreen platform never finishes. The window
        is closed after the loop."""
        QTimer.singleShot(0, lambda: app.exit(exit_code[0]))

    def finish() -> None:
        if screenshot:
            saved = desktop.window.grab().save(screenshot)
            _say_ready(f"screenshot {screenshot}" if saved else "no screenshot (not saved)")
        quit_soon()

    def answered(_event: object) -> None:
        _say_ready("message answered")
        QTimer.singleShot(0, finish)

    def loaded(_event: object) -> None:
        desktop.bridge.model_loaded.disconnect(loaded)  # once: a later reload is not the start
        if not desktop.window.isVisible():
            print("shardchat: not ready: the model loaded but the window is hidden", flush=True)
            exit_code[0] = 1
            quit_soon()
            return
        opened()  # in that order, even if the model was quicker than the first events
        _say_ready("window shown, model loaded")
        if not message:
            QTimer.singleShot(0, finish)
            return
        desktop.bridge.reply_finished.connect(answered)
        desktop.window.input.setPlainText(message)
        desktop.window.input.submit()

    def failed(event: object) -> None:
        print(f"shardchat: not ready: {getattr(event, 'message', event)}", flush=True)
        exit_code[0] = 1
        quit_soon()

    QTimer.singleShot(0, opened)  # the window was shown: once the events before this have run
    desktop.bridge.model_loaded.connect(loaded)
    desktop.bridge.request_failed.connect(failed)
