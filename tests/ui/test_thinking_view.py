"""A reasoning model in the chat window: thinking folded above the answer, saved apart
from it, and the Think toggle reaching the template's switch."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.load_planning import PlannedLoad
from app.stores.chat_store import ChatStore
from app.worker import EngineWorker
from engine.generation.sampling import GREEDY
from engine.llama.load_params import LoadParams
from engine.model.chat_template import CHATML_TEMPLATE
from ui.chat_controller import ChatController
from ui.engine_bridge import EngineBridge
from ui.main_window import MainWindow

TIMEOUT_MS = 60_000

# ChatML whose generation prompt opens the thinking unless enable_thinking is false
SWITCHED_TEMPLATE = CHATML_TEMPLATE.replace(
    "{{ '<|im_start|>assistant\n' }}",
    "{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and not enable_thinking %}"
    "{{ '<think>\n\n</think>\n\n' }}{% else %}{{ '<think>\n' }}{% endif %}",
)


@pytest.fixture
def thinking_app(qtbot, make_synthetic, tmp_path: Path):
    model = make_synthetic("llama", "F16", chat_template=SWITCHED_TEMPLATE)
    bridge = EngineBridge()
    worker = EngineWorker(bridge).start()
    store = ChatStore(tmp_path / "chats.sqlite3")
    window = MainWindow()
    qtbot.addWidget(window)
    params = LoadParams(str(model), n_ctx=512, n_threads=2)
    controller = ChatController(
        window, worker, bridge, store, PlannedLoad(params, None, None),
        GREEDY.with_changes(max_tokens=12),
    )  # fmt: skip
    with qtbot.waitSignal(bridge.model_loaded, timeout=TIMEOUT_MS):
        controller.start()
    window.show()
    yield window, controller, store, bridge
    controller.shutdown()
    worker.shutdown()
    store.close()


def send(qtbot, window: MainWindow, bridge: EngineBridge, text: str) -> None:
    with qtbot.waitSignal(bridge.reply_finished, timeout=TIMEOUT_MS):
        qtbot.keyClicks(window.input, text)
        qtbot.keyClick(window.input, Qt.Key.Key_Return)


def test_thinking_is_folded_above_the_answer_and_saved_apart(qtbot, thinking_app) -> None:
    window, controller, store, bridge = thinking_app
    assert window.settings.think.isEnabled() and window.settings.think.isChecked()
    send(qtbot, window, bridge, "Hi")
    saved = store.messages(controller.conversation_id)[-1]
    assert saved.thinking and saved.content == ""  # cut short inside its thinking
    assert "click to show" in window.chat_view.toPlainText()
    assert saved.thinking not in window.chat_view.toPlainText()  # folded until clicked
    assert not store.history(controller.conversation_id)[-1].thinking


def test_the_think_toggle_turns_thinking_off_for_the_conversation(qtbot, thinking_app) -> None:
    window, controller, store, bridge = thinking_app
    window.settings.think.setChecked(False)
    assert store.conversation(controller.conversation_id).settings["thinking"] is False
    send(qtbot, window, bridge, "Hi")
    saved = store.messages(controller.conversation_id)[-1]
    assert saved.content and not saved.thinking
    assert "Thought for" not in window.chat_view.toPlainText()
