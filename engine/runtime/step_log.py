"""Every llama_decode of a loaded model beside what its plan predicted for it.

The step log watches the model's scheduler: each step is logged as
n_tokens -> tier -> family -> predicted vs measured milliseconds, and the
records ride with each reply (ReplyFinished.steps), so the plan can be
checked against the machine it runs on. Given the model's StepCorrections, the
log also learns from every step: a step is predicted as the cost model's figure
times the correction of its family and tier, and its measurement updates that
correction (engine.planning.step_correction says how, and why robustly).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from engine.generation.decode_step import DecodeStep
from engine.generation.scheduler import Scheduler
from engine.machine.profile import Profile
from engine.planning.cost_model import CostModel
from engine.planning.execution import executable_plan, placement_for
from engine.planning.plan import Plan, PlanFamily
from engine.planning.step_correction import Correction, CorrectionKey, StepCorrections
from engine.runtime.loaded_model import LoadedModel

log = logging.getLogger("shardchat.steps")


@dataclass(frozen=True)
class StepRecord:
    """One llama_decode: its size, tier and family, predicted and measured milliseconds.

    `predicted_ms` is the cost model's figure times the correction learned before
    this step (`model_ms` alone where nothing was learned); `correction` is that of
    its family and tier after learning from this step: what a like step is
    predicted with next (no steps: the log learns nothing).
    """

    n_tokens: int
    n_past: int
    tier: int
    family: PlanFamily
    predicted_ms: float
    measured_ms: float
    model_ms: float  # the cost model's own prediction
    correction: Correction = Correction()
    sequences: tuple[int, ...] = ()  # which sequences shared the step (DecodeStep.sequences)

    @property
    def key(self) -> CorrectionKey:
        return CorrectionKey(self.family, self.tier)


class StepLog:
    """Times every llama_decode of a loaded model and sets it beside the plan's prediction."""

    def __init__(
        self,
        model: LoadedModel,
        plan: Plan,
        profile: Profile,
        keep: int = 4096,
        corrections: StepCorrections | None = None,
    ) -> None:
        self._model = model
        self._corrections = corrections
        self._plan = executable_plan(plan)
        self._cost = CostModel(profile)
        self.records: deque[StepRecord] = deque(maxlen=keep)
        self._placements = {f: placement_for(plan, f) for f in PlanFamily}
        self._scheduler: Scheduler | None = None

    def attach(self, scheduler: Scheduler | None = None) -> StepLog:
        """Watch the steps of a scheduler: the model's own (where every activity's streams
        ride, the conversation's, API clients' and a job's together) unless another is given."""
        self._scheduler = scheduler or self._model.scheduler
        self._scheduler.observers.append(self.record)
        return self

    def detach(self) -> None:
        if self._scheduler is not None and self.record in self._scheduler.observers:
            self._scheduler.observers.remove(self.record)
        self._scheduler = None

    def use_plan(self, plan: Plan) -> None:
        """The budget changed without moving any weight: predict with the new plan."""
        self._plan = executable_plan(plan)
        self._placements = {f: placement_for(plan, f) for f in PlanFamily}

    def drain(self) -> list[StepRecord]:
        records = list(self.records)
        self.records.clear()
        return records

    def record(self, step: DecodeStep) -> None:
        """One step of the scheduler, set beside what the plan predicted for it."""
        n_tokens, n_past, outputs = step.n_tokens, step.n_past, step.n_outputs
        family = self._plan.family_for(n_tokens)
        threads = self._plan.n_threads if n_tokens == 1 else self._plan.n_threads_batch
        predicted = self._cost.predict_step(
            self._model.inventory, n_tokens, threads, max(outputs, 1), n_past,
            self._placements[family],
        ).seconds  # fmt: skip
        key = CorrectionKey(family, self._plan.tier_for(n_tokens))
        model_ms, measured_ms = 1e3 * predicted, 1e3 * step.seconds
        applied, learned = Correction(), Correction()
        if self._corrections is not None:
            applied = self._corrections.get(key)
            learned = self._corrections.learn(key, model_ms, measured_ms)
        record = StepRecord(
            n_tokens, n_past, key.tier, family, model_ms * applied.factor, measured_ms,
            model_ms, learned, step.sequences,
        )  # fmt: skip
        self.records.append(record)
        log.debug(
            "llama_decode %d tokens -> tier %d -> %s (sequences %s): predicted %.2f ms, "
            "measured %.2f ms", n_tokens, record.tier, family.value,
            ",".join(map(str, step.sequences)), record.predicted_ms, record.measured_ms,
        )  # fmt: skip


def latest_correction(records: Iterable[StepRecord], key: CorrectionKey) -> Correction | None:
    """The correction the last of `records` with this family and tier left, if one learned."""
    learned = [r.correction for r in records if r.key == key and r.correction.steps > 0]
    return learned[-1] if learned else None
