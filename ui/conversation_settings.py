"""Per-conversation system prompt and sampling settings, shown above the chat.

It renders what the controller gives it and reports edits; pushing values in
blocks its own signals, so showing a conversation never looks like an edit.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QSpinBox,
    QWidget,
)

from engine.generation.sampling import SamplingSettings

MIN_CONTEXT, MAX_CONTEXT = 512, 262144
THINKING_KEY = "thinking"  # the Think toggle, stored beside the sampling settings


class ConversationSettings(QWidget):
    system_prompt_changed = Signal(str)
    sampling_changed = Signal(dict)  # SamplingSettings.to_dict()

    def __init__(self) -> None:
        super().__init__()
        self.system_prompt = QLineEdit(placeholderText="System prompt (optional)")
        self.temperature = _spin(0.0, 2.0, 0.05)
        self.top_p = _spin(0.05, 1.0, 0.05)
        self.max_tokens = QSpinBox(minimum=1, maximum=32768, singleStep=64)
        self.n_ctx = QSpinBox(minimum=MIN_CONTEXT, maximum=MAX_CONTEXT, singleStep=1024)
        self.n_ctx.setKeyboardTracking(False)  # a change reloads the model: only when settled
        for widget, name in ((self.system_prompt, "System prompt"),
                             (self.temperature, "Temperature"), (self.top_p, "Top-p"),
                             (self.max_tokens, "Maximum tokens in a reply"),
                             (self.n_ctx, "Context length in tokens")):  # fmt: skip
            widget.setAccessibleName(name)
        form = QFormLayout()
        form.addRow("System", self.system_prompt)
        numbers = QHBoxLayout()
        fields = (("Temperature", self.temperature), ("Top-p", self.top_p),
                  ("Max tokens", self.max_tokens), ("Context", self.n_ctx))  # fmt: skip
        for label, widget in fields:
            inner = QFormLayout()
            inner.addRow(label, widget)
            numbers.addLayout(inner)
        form.addRow(numbers)
        self._add_think_toggle(form)
        self.setLayout(form)
        self.system_prompt.editingFinished.connect(
            lambda: self.system_prompt_changed.emit(self.system_prompt.text())
        )
        for spin in (self.temperature, self.top_p, self.max_tokens, self.n_ctx):
            spin.valueChanged.connect(lambda _value: self.sampling_changed.emit(self.sampling()))

    def sampling(self) -> dict[str, Any]:
        """The sampling settings, and the context length under the "n_ctx" key."""
        settings = SamplingSettings(
            temperature=self.temperature.value(),
            top_p=self.top_p.value(),
            max_tokens=self.max_tokens.value(),
        ).to_dict()
        return {**settings, "n_ctx": self.n_ctx.value(), **self._thinking_setting()}

    # --- the Think toggle: a reasoning model's think / don't think switch ---

    def _add_think_toggle(self, form: QFormLayout) -> None:
        """Off until a model whose chat template has the switch is loaded."""
        self.think = QCheckBox("Think before answering")
        self.think.setChecked(True)
        self.think.setEnabled(False)
        self.think.setAccessibleName("Think before answering")
        self.think.setToolTip("only models whose chat template has a think switch (Qwen3)")
        self.think.toggled.connect(lambda _on: self.sampling_changed.emit(self.sampling()))
        form.addRow("Reasoning", self.think)

    def _thinking_setting(self) -> dict[str, bool]:
        return {THINKING_KEY: self.think.isChecked()} if self.think.isEnabled() else {}

    def show_thinking(self, available: bool, on: bool) -> None:
        """Whether the loaded model can be told to think, and the conversation's choice."""
        self.think.blockSignals(True)
        self.think.setEnabled(available)
        self.think.setChecked(on)
        self.think.blockSignals(False)

    def show_settings(self, system_prompt: str, sampling: SamplingSettings, n_ctx: int) -> None:
        widgets = (self.system_prompt, self.temperature, self.top_p, self.max_tokens, self.n_ctx)
        for widget in widgets:
            widget.blockSignals(True)
        self.system_prompt.setText(system_prompt)
        self.temperature.setValue(sampling.temperature)
        self.top_p.setValue(sampling.top_p)
        self.max_tokens.setValue(sampling.max_tokens)
        self.n_ctx.setValue(n_ctx)
        for widget in widgets:
            widget.blockSignals(False)


def _spin(low: float, high: float, step: float) -> QDoubleSpinBox:
    spin = QDoubleSpinBox(minimum=low, maximum=high, singleStep=step)
    spin.setDecimals(2)
    return spin
