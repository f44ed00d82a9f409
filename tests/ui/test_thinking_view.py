"""A reasoning model in the chat window: thinking folded above the answer, saved apart
from it, and the Think toggle reaching the template's switch."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.model.chat_template import CHATML_TEMPLATE
from tests.ui.chat_app import running_chat_app, send

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
    with running_chat_app(qtbot, model, tmp_path, n_ctx=512, max_tokens=12) as parts:
        yield parts


def test_thinking_is_folded_above_the_answer_and_saved_apart(qtbot, thinking_app) -> None:
    window, controller, store, bridge = thinking_app
    assert window.settings.think.isEnabled() and window.settings.think.isChecked()
    send(qtbot, window, bridge, "Hi")
    saved = store.messages(controller.conversation_id)[-1]
    assert saved.thinking and saved.content == ""  # cut short inside its thinking
    assert "click to show" in window.chat_view.shown_text()
    assert saved.thinking not in window.chat_view.shown_text()  # folded until clicked
    assert not store.history(controller.conversation_id)[-1].thinking


def test_the_think_toggle_turns_thinking_off_for_the_conversation(qtbot, thinking_app) -> None:
    window, controller, store, bridge = thinking_app
    window.settings.think.setChecked(False)
    assert store.conversation(controller.conversation_id).settings["thinking"] is False
    send(qtbot, window, bridge, "Hi")
    saved = store.messages(controller.conversation_id)[-1]
    assert saved.content and not saved.thinking
    assert "Thought for" not in window.chat_view.shown_text()
