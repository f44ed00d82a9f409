"""The whole chat window on a real model, for the tests that drive it end to end."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from PySide6.QtCore import Qt

from app.engine_host.worker import EngineWorker
from app.model_lifecycle.load_planning import PlannedLoad
from app.stores.chat_store import ChatStore
from engine.generation.sampling import GREEDY
from engine.llama.load_params import LoadParams
from ui.chat.chat_controller import ChatController
from ui.engine_bridge import EngineBridge
from ui.window.main_window import MainWindow

TIMEOUT_MS = 60_000


@contextmanager
def running_chat_app(
    qtbot, model: Path, tmp_path: Path, n_ctx: int, max_tokens: int
) -> Iterator[tuple[MainWindow, ChatController, ChatStore, EngineBridge]]:
    """Window, controller, store and bridge with `model` loaded; all shut down after."""
    bridge = EngineBridge()
    worker = EngineWorker(bridge).start()
    store = ChatStore(tmp_path / "chats.sqlite3")
    window = MainWindow()
    qtbot.addWidget(window)
    params = LoadParams(str(model), n_ctx=n_ctx, n_threads=2)
    controller = ChatController(
        window, worker, bridge, store, PlannedLoad(params, None, None),
        GREEDY.with_changes(max_tokens=max_tokens),
    )  # fmt: skip
    with qtbot.waitSignal(bridge.model_loaded, timeout=TIMEOUT_MS):
        controller.start()
    window.show()
    try:
        yield window, controller, store, bridge
    finally:
        controller.shutdown()
        worker.shutdown()
        store.close()


def send(qtbot, window: MainWindow, bridge: EngineBridge, text: str) -> None:
    """Type a message and press Enter; returns when the reply has finished."""
    with qtbot.waitSignal(bridge.reply_finished, timeout=TIMEOUT_MS):
        qtbot.keyClicks(window.input, text)
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
