"""The window with a base model: its model line says "base model: plain completion", the
conversation is written as a plain transcript, and the model manager's setting still wins."""

from __future__ import annotations

from pathlib import Path

from app.conversation.model_status import BASE_MODEL_NOTE
from app.stores.model_library import ModelLibrary
from tests.purpose_models import purpose_model
from tests.ui.test_desktop import TIMEOUT_MS, send


def test_a_base_model_is_named_as_one_and_written_to_as_plain_text(
    qtbot, desktops, make_synthetic, open_desktop, tmp_path: Path
) -> None:
    base = purpose_model(make_synthetic, tmp_path, "base")
    with ModelLibrary() as library:
        library.add(base)
    desktop = open_desktop(base)
    desktops.append(desktop)
    label = desktop.window.model_label
    assert label.text().endswith(f" · {BASE_MODEL_NOTE}")
    assert label.toolTip().startswith("Prompt format: completion (no chat template, and a base")
    reply = send(qtbot, desktop, "The capital of France is")
    assert reply.stats.generated_tokens >= 1
    assert desktop.chat.model.prompt_format.startswith("Prompt format: completion")
    manager = desktop.open_models()
    manager.refresh(select=base.resolve())
    manager.prompt_format.setCurrentText("gemma")
    with qtbot.waitSignal(desktop.bridge.prompt_format_chosen, timeout=TIMEOUT_MS):
        manager.prompt_format.activated.emit(manager.prompt_format.currentIndex())
    assert label.text().endswith(" · base model")  # the setting wins, and the line follows it
    assert label.toolTip() == "Prompt format: gemma (llama.cpp's built-in 'gemma', as set)"
