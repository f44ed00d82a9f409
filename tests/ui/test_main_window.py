"""The chat window end to end: real model, real worker, real SQLite history, offscreen Qt."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.engine_host.worker import EngineWorker
from app.model_lifecycle.load_planning import PlannedLoad
from app.screen_text.plan_words import NOT_PROFILED_WORDS, plan_in_words
from app.stores.chat_store import ChatStore
from engine.generation.sampling import GREEDY
from engine.model.inventory import read_inventory
from engine.planning.execution import load_params_for
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan
from tests.ui.chat_app import TIMEOUT_MS, running_chat_app, send
from ui.chat.chat_controller import ChatController
from ui.engine_bridge import EngineBridge
from ui.window.main_window import MainWindow


@pytest.fixture
def app_parts(qtbot, default_model_file: Path, tmp_path: Path):
    with running_chat_app(qtbot, default_model_file, tmp_path, n_ctx=1024, max_tokens=24) as parts:
        yield parts


def test_enter_sends_and_the_reply_streams_into_view_and_history(qtbot, app_parts) -> None:
    window, controller, store, bridge = app_parts
    assert window.input.isEnabled() and "llama" in window.model_label.text()
    send(qtbot, window, bridge, "What is the capital of France?")
    messages = store.messages(controller.conversation_id)
    assert [(m.role, m.complete) for m in messages] == [("user", True), ("assistant", True)]
    assert messages[1].content and messages[1].stats["generated_tokens"] > 0
    shown = window.chat_view.shown_text()
    assert "What is the capital of France?" in shown and messages[1].content.strip()[:20] in shown
    assert "tokens/s" in window.speed_label.text()
    assert " / 1,024 tokens" in window.speed_label.text()  # how much of the context is used
    assert window.conversations.currentItem().text().startswith("What is the capital")
    assert window.send_button.isEnabled() and not window.stop_button.isEnabled()


def test_shift_enter_makes_a_new_line_instead_of_sending(qtbot, app_parts) -> None:
    window, controller, store, _bridge = app_parts
    qtbot.keyClicks(window.input, "first line")
    qtbot.keyClick(window.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert window.input.toPlainText() == "first line\n"
    assert store.messages(controller.conversation_id) == []


def test_escape_stops_a_long_reply_and_keeps_what_was_said(qtbot, app_parts) -> None:
    window, controller, store, bridge = app_parts
    controller._settings = GREEDY.with_changes(max_tokens=2000)
    with qtbot.waitSignal(bridge.reply_finished, timeout=TIMEOUT_MS) as finished:
        qtbot.keyClicks(window.input, "Tell me a very long story about a dragon.")
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
        qtbot.waitSignal(bridge.token_streamed, timeout=TIMEOUT_MS).wait()
        qtbot.keyClick(window.input, Qt.Key.Key_Escape)
    assert finished.args[0].stats.finish_reason.value == "cancelled"
    reply = store.messages(controller.conversation_id)[-1]
    assert reply.role == "assistant" and reply.complete


def test_conversations_switch_and_keep_their_messages(qtbot, app_parts) -> None:
    window, controller, store, bridge = app_parts
    send(qtbot, window, bridge, "My name is Ada.")
    first = controller.conversation_id
    qtbot.mouseClick(window.new_chat, Qt.MouseButton.LeftButton)
    assert controller.conversation_id != first and window.chat_view.shown_text() == ""
    assert window.conversations.count() == 2
    window.conversations.setCurrentRow(
        next(i for i in range(2) if window.conversations.item(i).text().startswith("My name"))
    )
    assert controller.conversation_id == first
    assert "My name is Ada." in window.chat_view.shown_text()


def test_the_window_renders(qtbot, app_parts, tmp_path: Path) -> None:
    window, _controller, _store, bridge = app_parts
    send(qtbot, window, bridge, "Write a haiku about the sea.")
    picture = tmp_path / "window.png"
    assert window.grab().save(str(picture))
    assert picture.stat().st_size > 10_000


def test_regenerate_replaces_the_last_reply_without_duplicating_the_question(
    qtbot, app_parts
) -> None:
    window, controller, store, bridge = app_parts
    send(qtbot, window, bridge, "Name a colour.")
    with qtbot.waitSignal(bridge.reply_finished, timeout=TIMEOUT_MS):
        qtbot.mouseClick(window.regenerate_button, Qt.MouseButton.LeftButton)
    messages = store.messages(controller.conversation_id)
    assert [(m.role, m.content) for m in messages][:1] == [("user", "Name a colour.")]
    assert [m.role for m in messages] == ["user", "assistant"]


def test_edit_last_puts_the_message_back_and_forgets_its_reply(qtbot, app_parts) -> None:
    window, controller, store, bridge = app_parts
    send(qtbot, window, bridge, "Name a fruit.")
    qtbot.mouseClick(window.edit_button, Qt.MouseButton.LeftButton)
    assert window.input.toPlainText() == "Name a fruit."
    assert store.messages(controller.conversation_id) == []


def test_rename_by_editing_and_delete_the_open_chat(qtbot, app_parts) -> None:
    window, controller, store, bridge = app_parts
    send(qtbot, window, bridge, "Hello there.")
    first = controller.conversation_id
    window.conversations.currentItem().setText("Greetings")
    assert store.conversation(first).title == "Greetings"
    qtbot.mouseClick(window.new_chat, Qt.MouseButton.LeftButton)
    second = controller.conversation_id
    qtbot.mouseClick(window.delete_chat, Qt.MouseButton.LeftButton)
    assert [c.id for c in store.conversations()] == [first]
    assert controller.conversation_id == first and second != first
    assert "Hello there." in window.chat_view.shown_text()


def test_each_conversation_keeps_its_own_system_prompt_and_sampling(qtbot, app_parts) -> None:
    window, controller, store, bridge = app_parts
    send(qtbot, window, bridge, "Hi.")
    plain_prompt = store.messages(controller.conversation_id)[1].stats["prompt_tokens"]
    first = controller.conversation_id
    window.settings.max_tokens.setValue(7)
    window.settings.system_prompt.setText("You are a pirate who answers in one short sentence.")
    window.settings.system_prompt.editingFinished.emit()
    assert store.conversation(first).system_prompt.startswith("You are a pirate")
    assert store.conversation(first).settings["max_tokens"] == 7
    send(qtbot, window, bridge, "Hi again.")
    reply = store.messages(first)[-1].stats
    assert reply["generated_tokens"] <= 7
    assert reply["prompt_tokens"] > plain_prompt + 10  # the system prompt reached the model
    qtbot.mouseClick(window.new_chat, Qt.MouseButton.LeftButton)
    assert window.settings.system_prompt.text() == ""
    assert window.settings.max_tokens.value() == 24  # the app's default, not the other chat's


def test_the_status_bar_shows_the_plan_the_model_runs_under(
    qtbot, default_model_file: Path, tmp_path: Path, recorded_profile_here
) -> None:
    profile = recorded_profile_here
    inventory = read_inventory(default_model_file)
    plan = make_plan(inventory, profile, PlanRequest(0, n_ctx=1024))
    params = load_params_for(plan, inventory, str(default_model_file))
    bridge = EngineBridge()
    worker = EngineWorker(bridge).start()
    window = MainWindow()
    qtbot.addWidget(window)
    with ChatStore(tmp_path / "chats.sqlite3") as store:
        controller = ChatController(
            window, worker, bridge, store, PlannedLoad(params, plan, profile),
            GREEDY.with_changes(max_tokens=8),
        )  # fmt: skip
        try:
            with qtbot.waitSignal(bridge.model_loaded, timeout=TIMEOUT_MS):
                controller.start()
            assert window.plan_label.text() == "Every layer on the CPU · no VRAM used"
            send(qtbot, window, bridge, "Hi.")
        finally:
            controller.shutdown()
            worker.shutdown()
    assert plan_in_words(None) == NOT_PROFILED_WORDS
