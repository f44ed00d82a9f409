"""Per-conversation system prompt and sampling settings, in the window's side panel.

It renders what the controller gives it and reports edits; pushing values in
blocks its own signals, so showing a conversation never looks like an edit.
The everyday knobs are always in view; the penalties, DRY, the seed and stop
strings sit behind "More sampling", as in LM Studio's sidebar.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QFormLayout,
    QLineEdit,
    QSpinBox,
    QToolButton,
    QWidget,
)

from app.conversation.chat_state import THINKING_KEY  # the Think toggle, beside sampling
from engine.generation.sampling import SamplingSettings

MIN_CONTEXT, MAX_CONTEXT = 512, 262144
NO_SEED = -1  # the seed box's "random" (the model's seed)
STOP_SEPARATOR = ","


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
        self.top_k = QSpinBox(minimum=0, maximum=1000)
        self.min_p = _spin(0.0, 1.0, 0.01)
        self.repeat_penalty = _spin(0.5, 2.0, 0.05)
        self.repeat_last_n = QSpinBox(minimum=-1, maximum=MAX_CONTEXT, singleStep=64)
        self.presence_penalty = _spin(-2.0, 2.0, 0.1)
        self.frequency_penalty = _spin(-2.0, 2.0, 0.1)
        self.dry_multiplier = _spin(0.0, 5.0, 0.1)
        self.seed = QSpinBox(minimum=NO_SEED, maximum=2**31 - 1)
        self.seed.setSpecialValueText("random")
        self.stop = QLineEdit(placeholderText="e.g. ###, END")
        self.stop_loops = QCheckBox("Stop a reply that repeats itself")
        self.more = QToolButton()
        self.more.setText("More sampling")
        self.more.setCheckable(True)
        self._name_widgets()
        self.setLayout(self._layout())
        self._connect()

    def sampling(self) -> dict[str, Any]:
        """The sampling settings, and the context length under the "n_ctx" key."""
        stops = tuple(s.strip() for s in self.stop.text().split(STOP_SEPARATOR) if s.strip())
        seed = self.seed.value()
        settings = SamplingSettings(
            temperature=self.temperature.value(),
            top_k=self.top_k.value(),
            top_p=self.top_p.value(),
            min_p=self.min_p.value(),
            repeat_penalty=self.repeat_penalty.value(),
            repeat_last_n=self.repeat_last_n.value(),
            presence_penalty=self.presence_penalty.value(),
            frequency_penalty=self.frequency_penalty.value(),
            dry_multiplier=self.dry_multiplier.value(),
            seed=None if seed == NO_SEED else seed,
            stop=stops,
            max_tokens=self.max_tokens.value(),
            stop_loops=self.stop_loops.isChecked(),
        ).to_dict()
        return {**settings, "n_ctx": self.n_ctx.value(), **self._thinking_setting()}

    def show_settings(self, system_prompt: str, sampling: SamplingSettings, n_ctx: int) -> None:
        widgets = (self.system_prompt, self.stop, self.stop_loops, *self._numbers())
        for widget in widgets:
            widget.blockSignals(True)
        self.system_prompt.setText(system_prompt)
        for box, number in (
            (self.temperature, sampling.temperature), (self.top_p, sampling.top_p),
            (self.min_p, sampling.min_p), (self.repeat_penalty, sampling.repeat_penalty),
            (self.presence_penalty, sampling.presence_penalty),
            (self.frequency_penalty, sampling.frequency_penalty),
            (self.dry_multiplier, sampling.dry_multiplier),
        ):  # fmt: skip
            box.setValue(number)
        for spin, count in (
            (self.max_tokens, sampling.max_tokens), (self.n_ctx, n_ctx),
            (self.top_k, sampling.top_k), (self.repeat_last_n, sampling.repeat_last_n),
            (self.seed, NO_SEED if sampling.seed is None else sampling.seed),
        ):  # fmt: skip
            spin.setValue(count)
        self.stop.setText(f"{STOP_SEPARATOR} ".join(sampling.stop))
        self.stop_loops.setChecked(sampling.stop_loops)
        for widget in widgets:
            widget.blockSignals(False)

    def _numbers(self) -> tuple[QSpinBox | QDoubleSpinBox, ...]:
        return (
            self.temperature, self.top_p, self.max_tokens, self.n_ctx, self.top_k, self.min_p,
            self.repeat_penalty, self.repeat_last_n, self.presence_penalty,
            self.frequency_penalty, self.dry_multiplier, self.seed,
        )  # fmt: skip

    def _name_widgets(self) -> None:
        for widget, name in ((self.system_prompt, "System prompt"),
                             (self.temperature, "Temperature"), (self.top_p, "Top-p"),
                             (self.max_tokens, "Maximum tokens in a reply"),
                             (self.n_ctx, "Context length in tokens"), (self.top_k, "Top-k"),
                             (self.min_p, "Min-p"), (self.repeat_penalty, "Repeat penalty"),
                             (self.repeat_last_n, "Repeat penalty window in tokens"),
                             (self.presence_penalty, "Presence penalty"),
                             (self.frequency_penalty, "Frequency penalty"),
                             (self.dry_multiplier, "DRY multiplier"), (self.seed, "Seed"),
                             (self.stop, "Stop strings, comma separated"),
                             (self.stop_loops, "Stop a reply that repeats itself"),
                             (self.more, "More sampling settings")):  # fmt: skip
            widget.setAccessibleName(name)
        self.repeat_penalty.setToolTip("1.0: off. Ollama and LM Studio use about 1.1")
        self.repeat_last_n.setToolTip("How many of the reply's last tokens it looks at (-1: all)")
        self.dry_multiplier.setToolTip(
            "DRY ('don't repeat yourself'): penalise repeating a sequence already said (0: off)"
        )

    def _layout(self) -> QFormLayout:
        """One column, as in LM Studio's and Jan's right-hand panels: the everyday
        settings first, the rest folded under "More sampling"."""
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("System prompt", self.system_prompt)
        everyday = (("Temperature", self.temperature), ("Top-p", self.top_p),
                    ("Max tokens", self.max_tokens), ("Context", self.n_ctx))  # fmt: skip
        for label, widget in everyday:
            form.addRow(label, widget)
        self._add_think_toggle(form)
        form.addRow(self.more)
        self._advanced = QWidget()
        advanced = QFormLayout(self._advanced)
        advanced.setContentsMargins(0, 0, 0, 0)
        for label, box in (("Top-k", self.top_k), ("Min-p", self.min_p),
                           ("Repeat penalty", self.repeat_penalty),
                           ("… over tokens", self.repeat_last_n),
                           ("Presence", self.presence_penalty),
                           ("Frequency", self.frequency_penalty), ("DRY", self.dry_multiplier),
                           ("Seed", self.seed), ("Stop at", self.stop)):  # fmt: skip
            advanced.addRow(label, box)
        advanced.addRow(self.stop_loops)
        self._advanced.setVisible(False)
        form.addRow(self._advanced)
        return form

    def _connect(self) -> None:
        self.system_prompt.editingFinished.connect(
            lambda: self.system_prompt_changed.emit(self.system_prompt.text())
        )
        for spin in self._numbers():
            spin.valueChanged.connect(lambda _value: self.sampling_changed.emit(self.sampling()))
        self.stop.editingFinished.connect(lambda: self.sampling_changed.emit(self.sampling()))
        self.stop_loops.toggled.connect(lambda _on: self.sampling_changed.emit(self.sampling()))
        self.more.toggled.connect(self._advanced.setVisible)

    # --- the Think toggle: a reasoning model's think / don't think switch ---

    def _add_think_toggle(self, form: QFormLayout) -> None:
        """Off, and shown unticked, until a model whose chat template has the switch is
        loaded: a greyed tick would say the model thinks when nothing asks it to."""
        self.think = QCheckBox("Think before answering")
        self.think.setChecked(False)
        self.think.setEnabled(False)
        self.think.setAccessibleName("Think before answering")
        self.think.setToolTip("only models whose chat template has a think switch (Qwen3)")
        self.think.toggled.connect(lambda _on: self.sampling_changed.emit(self.sampling()))
        form.addRow("Reasoning", self.think)

    def _thinking_setting(self) -> dict[str, bool]:
        return {THINKING_KEY: self.think.isChecked()} if self.think.isEnabled() else {}

    def show_thinking(self, available: bool, on: bool) -> None:
        """Whether the loaded model can be told to think, and the conversation's choice; the
        choice shows only where it applies (unticked while the toggle is disabled)."""
        self.think.blockSignals(True)
        self.think.setEnabled(available)
        self.think.setChecked(available and on)
        self.think.blockSignals(False)


def _spin(low: float, high: float, step: float) -> QDoubleSpinBox:
    spin = QDoubleSpinBox(minimum=low, maximum=high, singleStep=step)
    spin.setDecimals(2)
    return spin
