"""Start the desktop app: the window, the engine worker, the history, one event loop.

The Qt event loop is driven by qasync, so later panels can use asyncio
(timers, file work) on the GUI thread without blocking it.
"""

from __future__ import annotations

import asyncio
import sys

import qasync
from PySide6.QtWidgets import QApplication

from app.chat_store import ChatStore
from app.worker import EngineWorker
from engine.model_params import LoadParams
from engine.sampling import SamplingSettings
from ui.chat_controller import ChatController
from ui.engine_bridge import EngineBridge
from ui.main_window import MainWindow


def run_gui(model_path: str, n_ctx: int = 4096) -> int:
    """Open the window on `model_path` and run until it is closed; returns the exit code."""
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("ShardChat")
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    bridge = EngineBridge()
    worker = EngineWorker(bridge).start()
    window = MainWindow()
    with ChatStore() as store:
        controller = ChatController(
            window, worker, bridge, store, LoadParams(model_path, n_ctx=n_ctx),
            SamplingSettings(),
        )  # fmt: skip
        if store.recovered_from is not None:
            window.statusBar().showMessage(
                f"the chat history was unreadable and was moved to {store.recovered_from}", 15000
            )
        controller.start()
        window.show()
        closed = asyncio.Event()
        app.aboutToQuit.connect(closed.set)
        try:
            with loop:
                loop.run_until_complete(closed.wait())
        finally:
            worker.shutdown()
    return 0
