"""Start the desktop app: the window, the engine worker, the history, one event loop.

The Qt event loop is driven by qasync, so panels can use asyncio (timers, file
work) on the GUI thread without blocking it.
"""

from __future__ import annotations

import asyncio
import os
import sys

import qasync
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QDialog

from app.load_planning import stored_profile
from app.profiling_job import needs_profiling
from engine.machine.hardware import probe_hardware
from ui.desktop import Desktop, remember_default_model
from ui.profile_wizard import ProfileWizard
from ui.theme import ThemeManager

EXIT_WHEN_READY_ENV = "SHARDCHAT_EXIT_WHEN_READY"  # see _quit_when_loaded


def run_gui(model_path: str, n_ctx: int = 4096, model_chosen: bool = False) -> int:
    """Open the window on `model_path` and run until it is closed; returns the exit code.

    On a machine never profiled, the first-launch wizard comes first; the model it
    chooses is used unless one was named on the command line (`model_chosen`).
    """
    app = QApplication.instance() or QApplication(sys.argv[:1])
    if not isinstance(app, QApplication):  # widgets cannot run under a bare QCoreApplication
        raise RuntimeError("the desktop app needs a QApplication, not a QCoreApplication")
    app.setApplicationName("ShardChat")
    app.setDesktopFileName("shardchat")
    theme = ThemeManager(parent=app)
    theme.apply(app)  # before the wizard, so it too follows the system's light or dark
    hardware = probe_hardware()
    exit_when_ready = os.environ.get(EXIT_WHEN_READY_ENV) == "1"
    if needs_profiling(hardware):
        wizard = ProfileWizard(hardware)
        if exit_when_ready:

            def skip_wizard() -> None:
                _say_ready("wizard shown")
                wizard.reject()

            QTimer.singleShot(0, skip_wizard)
        if wizard.exec() == QDialog.DialogCode.Accepted and not model_chosen:
            model_path = remember_default_model(wizard.chosen_model() or model_path)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    desktop = Desktop(model_path, stored_profile(), n_ctx, theme=theme).start()
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
    return exit_code[0]


def _say_ready(what: str) -> None:
    print(f"shardchat: ready: {what}", flush=True)


def _quit_when_loaded(app: QApplication, desktop: Desktop, exit_code: list[int]) -> None:
    """SHARDCHAT_EXIT_WHEN_READY=1 (start-up timing, installer checks): the wizard, if it
    opens, is skipped; once the window is shown with its model loaded the app says so and
    quits (exit 1 if the load fails)."""

    def loaded(_event: object) -> None:
        if desktop.window.isVisible():
            _say_ready("window shown, model loaded")
        else:
            print("shardchat: not ready: the model loaded but the window is hidden", flush=True)
            exit_code[0] = 1
        app.quit()

    def failed(event: object) -> None:
        print(f"shardchat: not ready: {getattr(event, 'message', event)}", flush=True)
        exit_code[0] = 1
        app.quit()

    desktop.bridge.model_loaded.connect(loaded)
    desktop.bridge.request_failed.connect(failed)
