"""What the VRAM panel does: read the GPU each second, apply a chosen or automatic budget.

A chosen budget, or a placement chosen by hand, goes to the engine worker as a
re-plan request; the worker finishes the reply in progress first and carries the
conversation into any reloaded model, so the panel never touches the chat. The
planner's prediction a manual placement is compared with comes from the worker too,
and so does what the chat's steps taught the cost model: each reply's step records
carry the correction the panel's predicted speed is shown with.
The GPU is read on the GUI thread: NVML's and ggml's memory queries take well under
a millisecond, and without a GPU it is not polled.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from app.engine_host.engine_client import EngineClient
from app.engine_host.events import PlacementFellBack, PlanChanged, ReplyFinished, RequestFailed
from app.model_lifecycle.auto_budget import AutoBudget
from app.screen_text.plan_words import decode_correction
from app.screen_text.units import format_bytes
from app.screen_text.vram_overview import vram_overview
from engine.errors import BadInputError
from engine.machine.gpu_probe import probe_gpus
from engine.machine.hardware_info import GpuInfo
from engine.planning.placement_choice import PlacementChoice
from engine.planning.plan import Plan
from engine.planning.step_correction import CorrectionKey
from engine.runtime.step_log import StepRecord
from ui.engine_bridge import EngineBridge
from ui.vram.vram_panel import VramPanel

REFRESH_MS = 1000
GpuReader = Callable[[], tuple[GpuInfo | None, str]]


def read_first_gpu() -> tuple[GpuInfo | None, str]:
    """The first GPU now (NVML's figures for NVIDIA, ggml's for others), or None and why not.

    First is llama.cpp's main GPU, the one a plan's resident layers go to.
    """
    gpus, reason, _driver, _cuda = probe_gpus()
    return (gpus[0] if gpus else None), reason or ""


class VramController(QObject):
    plan_applied = Signal(object)  # Plan, after the engine re-planned
    message = Signal(str)  # one line for the status bar

    def __init__(
        self,
        panel: VramPanel,
        worker: EngineClient,
        bridge: EngineBridge,
        plan: Plan | None,
        read_gpu: GpuReader = read_first_gpu,
    ) -> None:
        super().__init__(panel)
        self.panel, self.worker, self.bridge, self.plan = panel, worker, bridge, plan
        self._read_gpu = read_gpu
        self._gpu, self._no_gpu_reason = read_gpu()
        self._auto = AutoBudget(self._choose_budget, lambda: self._gpu)
        self._pending: dict[int, int] = {}  # request id -> budget asked for
        self._placements: dict[int, str] = {}  # request id -> placement asked for
        self.planner_plan: Plan | None = None  # the planner's, beside a manual placement
        self.api_slots: int | None = None  # the local API server's, while it serves
        self._learned: dict[CorrectionKey, StepRecord] = {}  # the last step of each, by key
        self._timer = QTimer(self, interval=REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        panel.budget_chosen.connect(self._choose_budget)
        panel.auto_toggled.connect(self.set_auto)
        panel.placement_chosen.connect(self.choose_placement)
        bridge.plan_changed.connect(self._on_plan_changed)
        bridge.placement_fell_back.connect(self._on_fell_back)
        bridge.request_failed.connect(self._on_failed)
        bridge.reply_finished.connect(self._on_reply_finished)
        self._render()
        if self._gpu is not None:
            self._timer.start()

    @property
    def auto(self) -> bool:
        return self._auto.budget_bytes is not None

    def set_auto(self, on: bool) -> None:
        """Follow free VRAM (applied now, then whenever it moves by a step) or stop following."""
        self._auto.budget_bytes = None
        if on and self._gpu is not None:
            self._auto.poll_once()
        self._render()

    def shutdown(self) -> None:
        self._timer.stop()
        self.bridge.plan_changed.disconnect(self._on_plan_changed)
        self.bridge.placement_fell_back.disconnect(self._on_fell_back)
        self.bridge.request_failed.disconnect(self._on_failed)
        self.bridge.reply_finished.disconnect(self._on_reply_finished)

    def use_plan(self, plan: Plan | None) -> None:
        """The chat loaded a model (another one, or another context length) under this plan."""
        self.plan, self.planner_plan = plan, None
        self._learned.clear()  # another model: what the last one taught does not apply
        self._pending.clear()
        self._placements.clear()
        self.panel.reset_placement()
        self._render()

    def use_api_slots(self, n_slots: int | None) -> None:
        """The local API server serves with n slots (None: it is off): the batch row
        predicts those sequences decoding together."""
        if n_slots != self.api_slots:
            self.api_slots = n_slots
            self._render()

    def refresh(self) -> None:
        """Read the GPU again; under Auto, re-plan when free VRAM moved."""
        self._gpu, self._no_gpu_reason = self._read_gpu()
        if self.auto:
            self._auto.poll_once()
        self._render()

    def _on_reply_finished(self, event: ReplyFinished) -> None:
        """The reply's steps carry what they taught the cost model: predict with it."""
        records = [r for r in event.steps if isinstance(r, StepRecord)]
        if records:
            self._learned.update((r.key, r) for r in records)
            self._render()

    def _on_fell_back(self, event: PlacementFellBack) -> None:
        self.message.emit(event.message)

    def _choose_budget(self, budget_bytes: int) -> None:
        if self.plan is None:
            self.message.emit("profile this machine first: the budget needs a plan")
            self._render()
            return
        self._pending[self.worker.set_budget(budget_bytes)] = budget_bytes
        self.message.emit(f"re-planning for a {format_bytes(budget_bytes)} VRAM budget…")
        self._render(budget_bytes)

    def choose_placement(self, text: str) -> None:
        """Re-plan under a placement ("auto", "cpu", "layers:N", "cpu-moe:N") at this budget."""
        if self.plan is None or self._gpu is None:
            why = "profile this machine first" if self.plan is None else self._no_gpu_reason
            self.message.emit(f"the placement was not applied: {why}")
            return
        try:
            choice = PlacementChoice.parse(text)
        except BadInputError as exc:
            self.message.emit(f"the placement was not applied: {exc}")
            return
        self._placements[self.worker.set_placement(choice)] = str(choice)
        self.message.emit(f"re-planning with placement {choice}…")

    def _on_plan_changed(self, event: PlanChanged) -> None:
        budget = self._pending.pop(event.request_id, None)
        placement = self._placements.pop(event.request_id, None)
        by_engine = event.request_id == 0  # the shared pool was made
        if (budget is None and placement is None and not by_engine) or event.plan is None:
            return
        self.plan, self.planner_plan = event.plan, event.planner_plan
        how = "model reloaded" if event.reloaded else "placement unchanged"
        if by_engine:
            self.message.emit(f"KV cells for API clients and summaries made: {how}")
        elif placement is not None:
            self.message.emit(f"placement {placement}: {how}")
        else:
            self.message.emit(f"VRAM budget {format_bytes(event.vram_budget_bytes)}: {how}")
        self.plan_applied.emit(event.plan)
        self._render()

    def _on_failed(self, event: RequestFailed) -> None:
        if self._pending.pop(event.request_id, None) is not None:
            self.message.emit(f"the budget was not applied: {event.message}")
            self._render()
        elif self._placements.pop(event.request_id, None) is not None:
            self.message.emit(f"the placement was not applied: {event.message}")
            self.panel.reset_placement()  # back to the placement that runs
            self._render()

    def _render(self, budget_bytes: int | None = None) -> None:
        if budget_bytes is None and self._pending:
            budget_bytes = list(self._pending.values())[-1]
        view = vram_overview(
            self.plan, self._gpu, self._no_gpu_reason, self.auto, budget_bytes, self.planner_plan,
            self.api_slots, decode_correction(self.plan, self._learned.values()),
        )  # fmt: skip
        self.panel.show_overview(view)
