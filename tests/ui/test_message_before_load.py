"""The input takes a message while the model loads: the message is saved and shown at once,
and asked as soon as the model has loaded, once (the model's history does not hold it
twice); Stop before then ends it unasked, and the message stays."""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.ui.conftest import SHORT, TIMEOUT_MS, no_gpu
from ui.chat.chat_sending import SENT_WHEN_LOADED
from ui.desktop import Desktop

QUESTION = "What is the capital of France?"


def opened_loading(qtbot, desktops, model, profile) -> Desktop:
    """The whole desktop, its model asked for and not loaded yet (no event has run)."""
    desktop = Desktop(str(model), profile, 1024, SHORT, no_gpu)
    desktops.append(desktop)
    qtbot.addWidget(desktop.window)
    desktop.start()
    return desktop


def type_message(qtbot, desktop: Desktop, text: str) -> None:
    qtbot.keyClicks(desktop.window.input, text)
    qtbot.keyClick(desktop.window.input, Qt.Key.Key_Return)


def test_a_message_sent_while_the_model_loads_is_answered_once_it_has(
    qtbot, desktops, default_model_file, recorded_profile_here
) -> None:
    desktop = opened_loading(qtbot, desktops, default_model_file, recorded_profile_here)
    window, chat = desktop.window, desktop.chat
    with qtbot.waitSignal(desktop.bridge.reply_finished, timeout=TIMEOUT_MS) as finished:
        assert window.input.isEnabled() and not chat.model_ready
        type_message(qtbot, desktop, QUESTION)
        assert not chat.model_ready  # held, not refused
        assert window.statusBar().currentMessage() == SENT_WHEN_LOADED
        assert [m.content for m in desktop.store.messages(chat.conversation_id)] == [QUESTION, ""]
    answer = finished.args[0]
    said = [(m.role, m.content) for m in desktop.store.messages(chat.conversation_id)]
    assert said == [("user", QUESTION), ("assistant", answer.text)] and answer.text.strip()

    chat.new_conversation()  # the same question to a model that was ready: the same prompt
    with qtbot.waitSignal(desktop.bridge.reply_finished, timeout=TIMEOUT_MS) as again:
        type_message(qtbot, desktop, QUESTION)
    assert again.args[0].stats.prompt_tokens == answer.stats.prompt_tokens
    assert again.args[0].text == answer.text


def test_stop_before_the_model_has_loaded_keeps_the_message_unasked(
    qtbot, desktops, default_model_file, recorded_profile_here
) -> None:
    desktop = opened_loading(qtbot, desktops, default_model_file, recorded_profile_here)
    window, chat = desktop.window, desktop.chat
    type_message(qtbot, desktop, QUESTION)
    assert window.stop_button.isEnabled()
    window.stop_button.click()
    assert not window.stop_button.isEnabled() and window.send_button.isEnabled()
    with qtbot.waitSignal(desktop.bridge.model_loaded, timeout=TIMEOUT_MS):
        pass
    with qtbot.waitSignal(desktop.bridge.reply_finished, timeout=TIMEOUT_MS) as finished:
        type_message(qtbot, desktop, "Say yes.")  # taken: nothing else is being answered
    said = [(m.role, m.content, m.complete) for m in desktop.store.messages(chat.conversation_id)]
    assert said == [
        ("user", QUESTION, True),
        ("assistant", "", True),
        ("user", "Say yes.", True),
        ("assistant", finished.args[0].text, True),
    ]
