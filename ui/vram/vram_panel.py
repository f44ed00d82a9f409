"""The VRAM panel: the budget slider, how the budget is spent, and what the plan predicts.

Under the bar the plan is said in plain words (app.screen_text.plan_words: what the GPU holds,
what the CPU computes, what crosses PCIe, where the KV cache is), and beside the
prediction the last reply's measured speed, which the chat sets after each reply.

It renders a `VramOverview` and reports what the person chose. Below, the other computers
lent to this one (ui.lent.lent_computers_box), each with its own budget. Dragging the
slider only moves the figure beside it; the new budget is reported once the
slider is released (or the keys stop) for RELEASE_DEBOUNCE_MS, because every
report re-plans and may reload the model.

The placement row (issue 13) is LM Studio's GPU offload control: the planner's
choice, CPU only, N whole layers on the GPU, or the experts of N blocks in host
memory. It is reported only when the person presses Apply (or Return in the count),
never on every keystroke, for the same reason.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.screen_text.units import format_bytes, speed_text
from app.screen_text.vram_overview import BATCH_SEQUENCES, VramOverview
from ui.lent.lent_computers_box import LentComputersBox

RELEASE_DEBOUNCE_MS = 300
UNKNOWN_LAYERS = 999  # the count's top before the model's blocks are known (llama.cpp clamps)
PLACEMENT_KINDS = (  # (what the combo says, the PlacementChoice kind)
    ("Automatic (planner)", "auto"),
    ("CPU only", "cpu"),
    ("Whole layers on the GPU", "layers"),
    ("MoE experts of N blocks on the CPU", "cpu-moe"),  # not offered for a dense model
)
COUNTED = ("layers", "cpu-moe")
MIB = 1 << 20
SEGMENT_COLOURS = {
    "weights": QColor("#3b82f6"),
    "KV cache": QColor("#10b981"),
    "compute buffers": QColor("#f59e0b"),
    "margin": QColor("#9ca3af"),
    "other programs": QColor("#ef4444"),
}


class StackedBar(QWidget):
    """A horizontal bar of (label, bytes) stretches over a whole; the rest is left empty."""

    def __init__(self) -> None:
        super().__init__()
        self.setMinimumHeight(22)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self._segments: list[tuple[str, int]] = []
        self._whole = 0

    def show_segments(self, segments: list[tuple[str, int]], whole: int) -> None:
        self._segments, self._whole = segments, whole
        self.setToolTip("\n".join(f"{label}: {format_bytes(n)}" for label, n in segments))
        self.update()

    def segments(self) -> list[tuple[str, int]]:
        return list(self._segments)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return QSize(240, 22)

    def paintEvent(self, _event: QPaintEvent) -> None:  # noqa: N802 - Qt's name
        painter = QPainter(self)
        frame = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        painter.setPen(self.palette().mid().color())
        painter.setBrush(self.palette().base())
        painter.drawRect(frame)
        if self._whole <= 0:
            return
        x = frame.left()
        for label, n_bytes in self._segments:
            width = frame.width() * min(n_bytes, self._whole) / self._whole
            painter.fillRect(QRectF(x, frame.top(), width, frame.height()), _colour(label))
            x += width


class VramPanel(QWidget):
    budget_chosen = Signal(object)  # int bytes (over 2 GiB: not a C int), once settled
    auto_toggled = Signal(bool)
    placement_chosen = Signal(str)  # "auto", "cpu", "layers:N" or "cpu-moe:N", once applied

    def __init__(self) -> None:
        super().__init__()
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setAccessibleName("VRAM budget")
        self.slider.setPageStep(256)
        self.budget_label = QLabel()
        self.auto = QCheckBox("Auto: follow free VRAM")
        self.auto.setAccessibleName("Follow free VRAM automatically")
        self.explanation = QLabel(wordWrap=True)
        self.bar = StackedBar()
        self.bar.setAccessibleName("What the plan keeps in VRAM")
        self.legend = QLabel(wordWrap=True)
        self.plan_words = QLabel(wordWrap=True)  # what the GPU holds, what the CPU computes
        self.plan_words.setAccessibleName("Where the plan puts the model")
        self.family = QLabel(wordWrap=True)
        self.chat = QLabel()
        self.last_speed = QLabel("–")  # the last reply's measured speed, by the prediction
        self.last_speed.setAccessibleName("The last reply's speed")
        self.batch = QLabel()
        self.batch_label = QLabel(f"Batch ({BATCH_SEQUENCES})")  # or the API server's slots
        self.live = QLabel(wordWrap=True)
        self.placement = QComboBox()
        self.placement.setAccessibleName("Placement")
        self.placement.view().setAccessibleName("Placement choices")
        self.placement_count = QSpinBox()
        self.placement_count.setAccessibleName("Placement count")
        self.apply_placement = QPushButton("Apply")
        self.apply_placement.setAccessibleName("Apply the placement")
        self.comparison = QLabel(wordWrap=True)
        self.comparison.setAccessibleName("Planner's prediction and yours")
        self.lent_computers = LentComputersBox()  # other computers' devices (issue 31)
        self._shown_placement: tuple[str, bool | None, int | None] | None = None
        self._n_layer: int | None = None  # the model's blocks, once the worker said
        self._debounce = QTimer(self, singleShot=True, interval=RELEASE_DEBOUNCE_MS)
        self._debounce.timeout.connect(self._report_budget)
        self._lay_out()
        self.slider.valueChanged.connect(self._on_slider_moved)
        self.slider.sliderReleased.connect(self._debounce.start)
        self.auto.toggled.connect(self.auto_toggled)
        self.placement.currentIndexChanged.connect(self._on_kind_changed)
        self.apply_placement.clicked.connect(self._report_placement)
        self.placement_count.lineEdit().returnPressed.connect(self._report_placement)

    def _lay_out(self) -> None:
        row = QHBoxLayout()
        row.addWidget(self.slider, stretch=1)
        row.addWidget(self.budget_label)
        placement = QHBoxLayout()
        placement.addWidget(self.placement, stretch=1)
        placement.addWidget(self.placement_count)
        placement.addWidget(self.apply_placement)
        form = QFormLayout()
        form.addRow("Placement", placement)
        form.addRow("Predicted", self.comparison)
        form.addRow("Plan", self.family)
        form.addRow("Chat", self.chat)
        form.addRow("Last reply", self.last_speed)
        form.addRow(self.batch_label, self.batch)
        form.addRow("GPU now", self.live)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("<b>VRAM budget</b>"))
        layout.addLayout(row)
        layout.addWidget(self.auto)
        layout.addWidget(self.explanation)
        layout.addWidget(self.bar)
        layout.addWidget(self.legend)
        layout.addWidget(self.plan_words)
        layout.addLayout(form)
        layout.addWidget(self.lent_computers)
        layout.addStretch(1)

    def show_overview(self, view: VramOverview) -> None:
        """Render the figures; the slider keeps its place while the person holds it."""
        self._show_slider(view)
        segments = [(s.label, s.n_bytes) for s in view.resident]
        if view.others_used_bytes:
            segments.append(("other programs", view.others_used_bytes))
        whole = view.vram_total_bytes if view.has_gpu else 0
        self.bar.show_segments(segments if view.has_gpu else [], whole)
        self.bar.setVisible(view.has_gpu)
        self.legend.setText(_legend(segments) if view.has_gpu else "")
        self.family.setText(view.family)
        self.plan_words.setText("\n".join(view.plan_details))
        self.chat.setText(_speed(view.chat_tokens_per_s, view.chat_ttft_s, view.chat_correction))
        self.batch.setText(_speed(view.batch_tokens_per_s, None))
        self.batch_label.setText(view.batch_label)
        self.live.setText(_live(view))
        self._show_placement(view)

    def show_last_speed(self, text: str) -> None:
        """The last reply's measured speed (app.screen_text.plan_words.speed_against_plan),
        kept across the once-a-second refresh until the next reply replaces it."""
        self.last_speed.setText(text or "–")

    def placement_text(self) -> str:
        """The placement the row shows now, as PlacementChoice.parse reads it."""
        kind = str(self.placement.currentData() or "auto")
        return f"{kind}:{self.placement_count.value()}" if kind in COUNTED else kind

    def reset_placement(self) -> None:
        """Show the running placement again at the next overview (a choice was refused)."""
        self._shown_placement = None

    def budget_bytes(self) -> int:
        return self.slider.value() * MIB

    def _show_slider(self, view: VramOverview) -> None:
        self.slider.setEnabled(view.has_gpu and not view.auto)
        self.auto.setEnabled(view.has_gpu)
        self.auto.blockSignals(True)
        self.auto.setChecked(view.auto and view.has_gpu)
        self.auto.blockSignals(False)
        if view.has_gpu:
            self.explanation.setText(_gpu_text(view))
        else:
            self.explanation.setText(f"{view.no_gpu_reason}: the model runs on the CPU.")
        if self.slider.isSliderDown() or self._debounce.isActive():
            return  # the person's choice is still settling: keep it in view
        self.slider.blockSignals(True)
        self.slider.setRange(0, view.vram_total_bytes // MIB)
        self.slider.setValue(view.budget_bytes // MIB)
        self.slider.blockSignals(False)
        self.budget_label.setText(format_bytes(view.budget_bytes))

    def _on_slider_moved(self, value: int) -> None:
        self.budget_label.setText(format_bytes(value * MIB))
        if not self.slider.isSliderDown():  # keys and clicks: settle, then report
            self._debounce.start()

    def _report_budget(self) -> None:
        if not self.slider.isSliderDown():
            self.budget_chosen.emit(self.budget_bytes())

    def _show_placement(self, view: VramOverview) -> None:
        """Enable the row where it applies; show the running placement when it changes only,
        so the once-a-second refresh never undoes a choice the person has not applied yet."""
        usable = view.has_gpu and view.has_plan
        for widget in (self.placement, self.apply_placement):
            widget.setEnabled(usable)
        reason = "" if view.has_gpu else f"{view.no_gpu_reason}: the model runs on the CPU."
        for control in (self.placement, self.placement_count, self.apply_placement):
            control.setToolTip(reason)
        self.comparison.setText(view.placement_comparison if view.has_gpu else reason)
        shown = (view.placement, view.is_moe, view.n_layer)
        if shown != self._shown_placement:
            self._shown_placement = shown
            self._n_layer = view.n_layer
            kind, _, count = view.placement.partition(":")
            self.placement.blockSignals(True)
            self.placement.clear()
            for label, data in PLACEMENT_KINDS:
                if data != "cpu-moe" or view.is_moe is not False or kind == "cpu-moe":
                    self.placement.addItem(label, data)
            self.placement.setCurrentIndex(max(self.placement.findData(kind), 0))
            self.placement.blockSignals(False)
            self._on_kind_changed()
            self.placement_count.setValue(int(count) if count.isdigit() else 0)
        self.placement_count.setEnabled(usable and self.placement.currentData() in COUNTED)

    def _on_kind_changed(self) -> None:
        """The count's range follows the kind: 0..n_layer+1 layers (the output layer too),
        0..n_layer blocks' experts; auto and CPU only take no count."""
        kind = self.placement.currentData()
        n_layer = self._n_layer
        top = UNKNOWN_LAYERS if n_layer is None else n_layer + (1 if kind == "layers" else 0)
        self.placement_count.setRange(0, top)
        self.placement_count.setEnabled(self.placement.isEnabled() and kind in COUNTED)

    def _report_placement(self) -> None:
        if self.apply_placement.isEnabled():
            self.placement_chosen.emit(self.placement_text())


def _colour(label: str) -> QColor:
    return SEGMENT_COLOURS.get(label, QColor("#6b7280"))


def _legend(segments: list[tuple[str, int]]) -> str:
    return " ".join(
        f"<span style='color:{_colour(label).name()}'>■</span> {label} {format_bytes(n)}"
        for label, n in segments
    )


def _speed(tokens_per_s: float | None, ttft_s: float | None, corrected: str = "") -> str:
    """ "24.1 tokens/s predicted (corrected from 31 after 400 steps), 0.39 s to first token"."""
    if tokens_per_s is None:
        return "–"
    text = f"{speed_text(tokens_per_s, 'tokens/s')} predicted"
    text = f"{text} ({corrected})" if corrected else text
    return text if ttft_s is None else f"{text}, {ttft_s:.2f} s to first token"


def _gpu_text(view: VramOverview) -> str:
    """Which GPU, through which llama.cpp backend and device: "… — Vulkan (Vulkan0), 2.0 GiB"."""
    memory = format_bytes(view.vram_total_bytes)
    if view.integrated:
        memory += " of system RAM (integrated GPU)"
    return f"{view.gpu_name} — {view.backend}, {memory}"


def _live(view: VramOverview) -> str:
    if not view.has_gpu:
        return "no GPU"
    if view.shardchat_used_bytes is None:  # the backend cannot say whose the memory is
        return (
            f"in use {format_bytes(view.gpu_used_bytes or 0)} (ShardChat and other programs)"
            f" · of {format_bytes(view.vram_total_bytes)}"
        )
    return (
        f"ShardChat {format_bytes(view.shardchat_used_bytes)} · other programs "
        f"{format_bytes(view.others_used_bytes or 0)} · of {format_bytes(view.vram_total_bytes)}"
    )
