"""Start the desktop app: the window, the engine worker, the history, one event loop.

The Qt event loop is driven by qasync, so panels can use asyncio (timers, file
work) on the GUI thread without blocking it.
"""

from __future__ import annotations

import asyncio
import sys

import qasync
from PySide6.QtWidgets import QApplication, QDialog

from app.load_planning import stored_profile
from app.profiling_job import needs_profiling
from engine.hardware import probe_hardware
from ui.desktop import Desktop, remember_default_model
from ui.profile_wizard import ProfileWizard


def run_gui(model_path: str, n_ctx: int = 4096, model_chosen: bool = False) -> int:
    """Open the window on `model_path` and run until it is closed; returns the exit code.

    On a machine never profiled, the first-launch wizard comes first; the model it
    chooses is used unless one was named on the command line (`model_chosen`).
    """
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("ShardChat")
    app.setDesktopFileName("shardchat")
    hardware = probe_hardware()
    if needs_profiling(hardware):
        wizard = ProfileWizard(hardware)
        if wizard.exec() == QDialog.DialogCode.Accepted and not model_chosen:
            model_path = remember_default_model(wizard.chosen_model() or model_path)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    desktop = Desktop(model_path, stored_profile(), n_ctx).start()
    closed = asyncio.Event()
    app.aboutToQuit.connect(closed.set)
    try:
        with loop:
            loop.run_until_complete(closed.wait())
    finally:
        desktop.close()
    return 0
