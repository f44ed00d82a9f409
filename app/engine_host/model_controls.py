"""The requests that change the loaded model: load, re-plan, unload, its prompt format, and
a new conversation.

The engine worker runs them only while no conversation turn or summary job
uses the model (API streams are ended by the unload itself). The
conversation, its messages, belongs here too: every reload carries it into
the new model's context, and the worker's next turn continues it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from app.api.api_streams import ApiStreams
from app.engine_host.engine_requests import (
    LoadModel,
    LoadPlanned,
    Queued,
    SetBudget,
    SetPlacement,
    SetPromptFormat,
    StartConversation,
    UnloadModel,
)
from app.engine_host.events import (
    ConversationStarted,
    EngineEvent,
    ModelLoaded,
    ModelUnloaded,
    PlacementFellBack,
    PlanChanged,
    PromptFormatChosen,
)
from app.model_lifecycle.load_planning import ContextShape, LoadRequest, PlannedLoad
from app.model_lifecycle.resident_model import Replanned, ResidentModel
from app.stores.model_library import prompt_format_for
from app.stores.stored_history import StoredHistory
from engine.errors import BadInputError
from engine.llama.load_params import LoadParams
from engine.machine.profile import Profile
from engine.model.model_naming import readable_model_name
from engine.model.prompt_format import AUTO
from engine.planning.placement_choice import PlacementChoice
from engine.planning.plan import Plan
from engine.runtime.chat import ChatSession


class ModelControls:
    """Runs a control request against the resident model; holds the conversation."""

    def __init__(
        self, resident: ResidentModel, api: ApiStreams, emit: Callable[[EngineEvent], None]
    ) -> None:
        self._resident = resident
        self._api = api
        self._emit = emit
        self._session: ChatSession | None = None
        self._handlers: dict[type, Callable[[Queued], None]] = {
            LoadModel: self._load,
            LoadPlanned: self._load_planned,
            UnloadModel: self._unload,
            SetBudget: self._set_budget,
            SetPlacement: self._set_placement,
            SetPromptFormat: self._set_prompt_format,
            StartConversation: self._start_conversation,
        }

    def run(self, entry: Queued) -> None:
        """Carry out a control request (BadInputError for what cannot be done as asked)."""
        self._handlers[type(entry.request)](entry)

    def conversation(self) -> ChatSession:
        """The conversation on the loaded model (a new one if none was started)."""
        model = self._resident.require()  # refused while no model is loaded
        if self._session is None:
            self._session = ChatSession(model)
        return self._session

    def switch_for_api(self, model_path: str, mmproj_path: str | None) -> None:
        """Load the model an API request names (the server allows switching), planned as the
        current one is: the same context, threads, profile and budget, with the pool the
        API's clients share."""
        current, plan = self._resident.model, self._resident.plan
        params = current.params if current is not None else None
        shape = ContextShape.with_pool()
        if current is not None and current.pool_cells > 0:  # `shardchat serve --parallel`'s
            shape = ContextShape.of(current.params)
        request = LoadRequest(
            model_path,
            params.n_ctx if params is not None else 4096,
            self._resident.profile,
            plan.request.vram_budget_bytes if plan is not None else None,
            mmproj_path,
            n_threads=params.n_threads if params is not None else None,
            shape=shape,
        )
        self._load_planned(Queued(0, LoadPlanned(request)))

    def needs_pool(self) -> bool:
        """The loaded model's context lacks the pool the API's clients and jobs share."""
        model = self._resident.model
        return model is not None and model.pool_cells == 0

    def make_pool(self) -> None:
        """Give the loaded model's context the pool an activity about to start needs (the
        API's first client, a summary job): re-planned, the weights staying where they can
        (ResidentModel.reshape). Only while nothing runs on the model; the conversation is
        evaluated again at its next turn."""
        self._resident.require()
        if not self.needs_pool():
            return
        outcome = self._resident.reshape(ContextShape.with_pool())
        model = self._resident.require()
        self._api.loaded(model)
        self._session = ChatSession(model, history=self._session.messages if self._session else [])
        if outcome is not None:  # request 0: the engine re-planned by itself
            self._plan_changed(0, outcome.plan.request.vram_budget_bytes, outcome)

    def _load(self, entry: Queued) -> None:
        request: LoadModel = entry.request  # type: ignore[assignment]
        self._load_under(
            entry.request_id, request.params, request.plan, request.profile, request.planned,
            prompt_format_for(request.params.model_path, request.prompt_format),
        )  # fmt: skip

    def _load_planned(self, entry: Queued) -> None:
        request: LoadPlanned = entry.request  # type: ignore[assignment]
        try:
            load = request.request.planned()
        except ValueError as exc:
            raise BadInputError(str(exc)) from exc
        fmt = prompt_format_for(request.request.model_path, request.request.prompt_format)
        self._load_under(entry.request_id, load.params, load.plan, load.profile, load, fmt)

    def _load_under(
        self,
        request_id: int,
        params: LoadParams,
        plan: Plan | None,
        profile: Profile | None,
        planned: PlannedLoad | None = None,
        prompt_format: str = AUTO,
    ) -> None:
        started = time.perf_counter()
        history = self._session.messages if self._session else []
        attached = self._resident.load(params, plan, profile, planned, prompt_format)
        model = self._resident.require()
        self._api.loaded(model)
        self._session = ChatSession(model, history=history)  # the conversation carries over
        inventory = model.inventory
        self._emit(
            ModelLoaded(
                request_id=request_id,
                model_path=str(params.model_path),
                model_name=readable_model_name(params.model_path, inventory.name),
                architecture=inventory.architecture,
                n_params=inventory.n_params,
                n_ctx=model.n_ctx,
                load_seconds=time.perf_counter() - started,
                load_params=model.params.to_dict(),
                plan=plan,
                vision=attached.vision,
                vision_problem=attached.problem,
                prompt_format=model.prompt_format.name,
                prompt_format_reason=model.prompt_format.reason,
                thinking_switch=model.chat_template.has_thinking_switch,
                base_model=model.purpose.is_base,
                general_name=inventory.name,
            )
        )

    def _set_prompt_format(self, entry: Queued) -> None:
        request: SetPromptFormat = entry.request  # type: ignore[assignment]
        chosen = self._resident.use_prompt_format(request.name)
        self._emit(
            PromptFormatChosen(entry.request_id, chosen.name, chosen.kind.value, chosen.reason)
        )

    def _set_budget(self, entry: Queued) -> None:
        request: SetBudget = entry.request  # type: ignore[assignment]
        # a placement chosen by hand (it rides in the plan) is kept while it fits
        self._replan_loaded(entry.request_id, request.vram_budget_bytes, None)

    def _set_placement(self, entry: Queued) -> None:
        request: SetPlacement = entry.request  # type: ignore[assignment]
        plan = self._resident.plan
        budget = plan.request.vram_budget_bytes if plan is not None else 0
        self._replan_loaded(entry.request_id, budget, request.choice)

    def _replan_loaded(
        self, request_id: int, budget_bytes: int, choice: PlacementChoice | None
    ) -> None:
        """Re-plan the loaded model (ResidentModel.replan); the conversation follows a reload."""
        history = self._session.messages if self._session else []
        outcome = self._resident.replan(budget_bytes, choice)
        if outcome.reloaded:
            self._session = ChatSession(self._resident.require(), history=history)
            self._api.loaded(self._resident.require())
        if outcome.fell_back is not None:
            self._emit(PlacementFellBack(request_id, outcome.wanted, outcome.fell_back))
        self._plan_changed(request_id, budget_bytes, outcome)

    def _plan_changed(self, request_id: int, budget_bytes: int, outcome: Replanned) -> None:
        plan = outcome.plan
        self._emit(
            PlanChanged(
                request_id, budget_bytes, outcome.reloaded, plan.reason,
                plan.predicted_decode_tokens_per_s, plan.predicted_ttft_s,
                plan.n_gpu_layers, plan, outcome.planner_plan,
            )
        )  # fmt: skip

    def _unload(self, entry: Queued) -> None:
        model = self._resident.model
        path = model.params.model_path if model else None
        self._resident.close()  # the conversation stays, for the next model
        self._emit(ModelUnloaded(entry.request_id, path))

    def _start_conversation(self, entry: Queued) -> None:
        request: StartConversation = entry.request  # type: ignore[assignment]
        history = request.history
        model = self._resident.require()
        if isinstance(history, StoredHistory):
            history = history.read()
        self._session = ChatSession(model, request.system_prompt, history)
        self._emit(ConversationStarted(entry.request_id, len(self._session.messages)))
