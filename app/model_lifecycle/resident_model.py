"""The one resident model and what goes with it: its plan, projector, step log, budget changes.

The engine worker is a queue; this is what its requests act on. Loading
replaces the model (and its projector), re-planning for a new budget or a
placement chosen by hand goes through one path that reloads only when the
placement moves, and the step log sets every llama_decode beside the plan,
learning a correction of the cost model that is kept with the profile (in the
profile store, loaded with the model, saved as steps come).
Only the worker thread touches it, the profile store's connection included.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from app.model_lifecycle.load_planning import ContextShape, PlannedLoad, with_vision
from app.stores.profile_store import ProfileStore, model_key
from engine.errors import BadInputError
from engine.llama.load_params import LoadParams
from engine.machine.profile import Profile
from engine.model.prompt_format import AUTO as AUTO_FORMAT
from engine.model.prompt_format import PromptFormat
from engine.planning.placement_choice import (
    AUTO,
    PlacementChoice,
    load_params_for_plan,
    plan_for_choice,
    replan,
)
from engine.planning.plan import Plan, PlanRequest
from engine.planning.step_correction import Correction, CorrectionKey, StepCorrections
from engine.runtime.loaded_model import LoadedModel, inspect_model, load_model
from engine.runtime.step_log import StepLog, StepRecord
from engine.vision.runtime import attach_projector

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Attached:
    """What became of the projector a load asked for: its summary, or why it is not there."""

    vision: str | None = None
    problem: str | None = None


@dataclass(frozen=True)
class Replanned:
    """A re-plan's outcome: the plan that runs, and what the panel shows about it."""

    plan: Plan
    reloaded: bool
    planner_plan: Plan | None  # what the planner would choose, when a manual placement runs
    fell_back: str | None  # why a manual placement gave way to the planner's, if it did
    wanted: str  # the placement that was asked for


class ResidentModel:
    """The loaded model (or none), the plan and profile it runs under, its projector."""

    def __init__(self, store_path: Path | None = None) -> None:
        """`store_path`: the profile store the step corrections are kept in (default: the
        app's; opened on the worker thread at each load)."""
        self.model: LoadedModel | None = None
        self.plan: Plan | None = None
        self.profile: Profile | None = None
        self.mmproj: str | None = None  # the loaded model's projector, while it sees images
        self.prompt_format = AUTO_FORMAT  # the loaded model's setting; reloads keep it
        self._steps: StepLog | None = None
        self._store_path = store_path
        self._store: ProfileStore | None = None
        self._corrections: StepCorrections | None = None
        # called before the model is freed: what holds a context on it lets go first
        self.before_close: list[Callable[[], None]] = []

    def require(self) -> LoadedModel:
        if self.model is None:
            raise BadInputError("no model is loaded; load one first")
        return self.model

    def load(
        self,
        params: LoadParams,
        plan: Plan | None,
        profile: Profile | None,
        planned: PlannedLoad | None = None,
        prompt_format: str = AUTO_FORMAT,
    ) -> Attached:
        """Free the resident model and load this one (a bad file is refused first), its
        prompts written in `prompt_format` (engine.model.prompt_format)."""
        inspect_model(params.model_path)
        self.prompt_format = prompt_format
        self._replace(params, plan, profile)
        return self._attach_projector(planned)

    def replan(self, budget_bytes: int, choice: PlacementChoice | None) -> Replanned:
        """Re-plan the loaded model for a budget under `choice` (None: the plan's own).

        Used for budget and placement changes alike: both reload only when the
        placement moves, and both say what the planner would have chosen when a
        manual placement runs. The projector's room comes out of the same budget
        (vision's smaller resident set). Nothing changes before the new plan is
        made, so a refused choice leaves the model and its plan as they were.
        """
        plan = self._require_plan()
        return self._replanned(replace(plan.request, vram_budget_bytes=budget_bytes), choice)

    def reshape(self, shape: ContextShape) -> Replanned | None:
        """Give the context the sequences and shared KV cells `shape` asks for (an activity
        that needs them starts: the API's first client, a summary job), re-planned so the
        account holds them: the context alone is re-created while the weights may stay
        where they are, the model reloads where the plan must move some. None without a
        plan (the cells are RAM, and there is nothing to re-plan)."""
        model = self.require()
        if self.plan is None or self.profile is None:
            model.reshape(shape.n_parallel, shape.shared_cells)
            return None
        request = replace(
            self.plan.request,
            parallel_sequences=shape.n_parallel,
            shared_cells=shape.shared_cells,
        )
        return self._replanned(request, None)

    def _require_plan(self) -> Plan:
        self.require()
        if self.plan is None or self.profile is None:
            raise BadInputError("the loaded model runs without a plan; load it with a budget")
        return self.plan

    def _replanned(self, request: PlanRequest, choice: PlacementChoice | None) -> Replanned:
        """Plan `request` for the loaded model and run it, moving only what must move."""
        model, plan, profile = self.require(), self._require_plan(), self.profile
        assert profile is not None
        new_plan, planner_plan, fell_back = _new_plans(model, plan, profile, request, choice)
        wanted = str(new_plan.extras.get("requested_placement", ""))
        params = load_params_for_plan(new_plan, model.inventory, model.params.model_path)
        load = PlannedLoad(params, new_plan, profile)
        if self.mmproj is not None:
            placed = PlacementChoice.parse(str(new_plan.extras.get("placement", AUTO)))
            budget = request.vram_budget_bytes
            load = with_vision(load, model.inventory, self.mmproj, budget, placed)
            new_plan, params = load.plan or new_plan, load.params
        shaped = model.params.with_changes(
            n_parallel=params.n_parallel, n_ctx_shared=params.n_ctx_shared
        )
        reloaded = params != shaped
        if reloaded:
            self._replace(params, new_plan, profile)
        else:
            if shaped != model.params:  # the weights stay: a context of the new shape
                model.reshape(params.n_parallel, params.n_ctx_shared)
            self.plan = new_plan
            if self._steps is not None:
                self._steps.use_plan(new_plan)
        self._reattach_projector(load)
        return Replanned(new_plan, reloaded, planner_plan, fell_back, wanted)

    def use_prompt_format(self, name: str) -> PromptFormat:
        """Switch the loaded model's prompt format (kept across re-plans); a refused name
        changes nothing."""
        chosen = self.require().use_prompt_format(name)
        self.prompt_format = name
        return chosen

    def drain_steps(self) -> tuple[StepRecord, ...]:
        return tuple(self._steps.drain()) if self._steps else ()

    def close(self) -> None:
        if self.model is not None:
            for hook in self.before_close:
                hook()
        self._keep_corrections()
        self._steps = None
        self.plan = self.profile = None
        if self.model is not None:
            self.model.close()
            self.model = None

    def _replace(self, params: LoadParams, plan: Plan | None, profile: Profile | None) -> None:
        self.close()
        self.model = load_model(params, self.prompt_format)
        self.plan, self.profile = plan, profile
        if plan is not None and profile is not None:
            self._corrections = self._learned(params.model_path, profile)
            self._steps = StepLog(self.model, plan, profile, corrections=self._corrections)
            self._steps.attach()

    def _learned(self, model_path: str, profile: Profile) -> StepCorrections:
        """What earlier sessions of this model under this profile taught the cost model, saved
        back as it learns more; a store that cannot be used leaves it learning for now only."""
        try:
            self._store = store = ProfileStore(self._store_path)
            key = model_key(model_path)
            known = store.corrections(profile, key)
        except (sqlite3.Error, OSError, BadInputError) as exc:
            log.warning("what the steps teach the cost model is not kept: %s", exc)
            return StepCorrections()

        def save(changed: Mapping[CorrectionKey, Correction]) -> None:
            try:
                store.save_corrections(profile, key, changed)
            except (sqlite3.Error, BadInputError) as exc:
                log.warning("could not keep what the steps taught the cost model: %s", exc)

        return StepCorrections(known, save)

    def _keep_corrections(self) -> None:
        """Save what the closing model's steps taught, and let the store go."""
        if self._corrections is not None:
            self._corrections.flush()
        if self._store is not None:
            self._store.close()
        self._corrections = self._store = None

    def _attach_projector(self, planned: PlannedLoad | None) -> Attached:
        """Give the new model its projector; a bad one leaves a working text model."""
        self.mmproj = None
        if planned is None or planned.mmproj_path is None:
            return Attached()
        if planned.vision is None:
            log.warning("loaded without vision: %s", planned.vision_problem)
            return Attached(problem=planned.vision_problem)
        try:
            attach_projector(self.require(), planned.mmproj_path, planned.vision.options)
        except BadInputError as exc:
            log.warning("loaded without vision: %s", exc)
            return Attached(problem=str(exc))
        self.mmproj = planned.mmproj_path
        return Attached(vision=planned.vision.summary)

    def _reattach_projector(self, load: PlannedLoad) -> None:
        """After a re-plan, the projector (kept across a reload) runs under VLMOpt's new choice."""
        if self.mmproj is None:
            return
        if load.vision is None:
            log.warning("the projector could not follow the new plan: %s", load.vision_problem)
            return
        try:
            attach_projector(self.require(), self.mmproj, load.vision.options)
        except BadInputError as exc:
            log.warning("the projector could not follow the new plan: %s", exc)


def _new_plans(
    model: LoadedModel,
    plan: Plan,
    profile: Profile,
    request: PlanRequest,
    choice: PlacementChoice | None,
) -> tuple[Plan, Plan | None, str | None]:
    """The plan for the new request, the planner's own when a manual placement runs, and why
    a manual placement fell back (if it did); BadInputError for a choice that cannot run."""
    inventory, gpu = model.inventory, int(plan.extras.get("gpu", 0))
    try:
        if choice is None:
            new_plan, fell_back = replan(inventory, profile, request, plan)
        else:
            new_plan = plan_for_choice(inventory, profile, request, choice, gpu)
            fell_back = None
        planner_plan = None
        if new_plan.extras.get("placement", "auto") != str(AUTO):
            planner_plan = plan_for_choice(inventory, profile, request, AUTO, gpu)
    except ValueError as exc:
        raise BadInputError(str(exc)) from exc
    return new_plan, planner_plan, fell_back
