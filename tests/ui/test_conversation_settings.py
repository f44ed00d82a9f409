"""The conversation settings: every sampling knob is shown, edited and reported as settings."""

from __future__ import annotations

from PySide6.QtCore import Qt

from engine.generation.sampling import SamplingSettings
from ui.conversation.conversation_settings import ConversationSettings

STORED = SamplingSettings(
    temperature=0.3, top_k=12, top_p=0.8, min_p=0.1, repeat_penalty=1.25, repeat_last_n=128,
    presence_penalty=0.4, frequency_penalty=0.2, dry_multiplier=0.8, seed=42,
    stop=("###", "END"), max_tokens=300, stop_loops=False,
)  # fmt: skip


def test_showing_settings_fills_every_knob_without_reporting_an_edit(qtbot) -> None:
    widget = ConversationSettings()
    qtbot.addWidget(widget)
    edits: list[dict] = []
    widget.sampling_changed.connect(edits.append)
    widget.show_settings("Be brief.", STORED, 4096)
    assert edits == []
    shown = widget.sampling()
    assert shown.pop("n_ctx") == 4096
    assert SamplingSettings.from_dict(shown) == STORED


def test_an_edit_behind_more_sampling_is_reported(qtbot) -> None:
    widget = ConversationSettings()
    qtbot.addWidget(widget)
    widget.show_settings("", SamplingSettings(), 2048)
    widget.show()
    assert not widget.dry_multiplier.isVisible()
    qtbot.mouseClick(widget.more, Qt.MouseButton.LeftButton)
    assert widget.dry_multiplier.isVisible()
    with qtbot.waitSignal(widget.sampling_changed) as edit:
        widget.dry_multiplier.setValue(0.8)
    assert SamplingSettings.from_dict(edit.args[0]).dry_multiplier == 0.8
    with qtbot.waitSignal(widget.sampling_changed) as edit:
        widget.seed.setValue(5)
    assert SamplingSettings.from_dict(edit.args[0]).seed == 5
    with qtbot.waitSignal(widget.sampling_changed) as edit:
        widget.seed.setValue(widget.seed.minimum())
    assert SamplingSettings.from_dict(edit.args[0]).seed is None  # "random"
    widget.stop.setText(" ###,  , END ")
    with qtbot.waitSignal(widget.sampling_changed) as edit:
        widget.stop.editingFinished.emit()
    assert SamplingSettings.from_dict(edit.args[0]).stop == ("###", "END")
