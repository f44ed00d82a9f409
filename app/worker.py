"""The engine worker: one thread that owns the one resident model.

Every other thread talks to the model through this worker's request queue and
hears back through a single event callback, so the GUI thread never blocks on
llama.cpp and two requests can never use the model at once. Cancelling is the
one thing that bypasses the queue: it flips the running request's flag at
once, which the generation loop and llama.cpp's abort callback watch.
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.api.api_streams import ApiStreams
from app.api.engine_calls import ApiJob
from app.events import (
    ConversationStarted,
    EngineEvent,
    JobFinished,
    JobProgressed,
    ModelLoaded,
    ModelUnloaded,
    PlacementFellBack,
    PlanChanged,
    PromptFormatChosen,
    ReplyFinished,
    RequestFailed,
    TokenStreamed,
)
from app.load_planning import LoadRequest, PlannedLoad
from app.model_library import prompt_format_for
from app.resident_model import ResidentModel
from app.stores.job_store import JobStore
from app.summaries.summary_job import SummaryJob, SummarySettings
from engine.cancel import CancelToken
from engine.errors import BadInputError
from engine.generation.sampling import SamplingSettings
from engine.llama.load_params import LoadParams
from engine.machine.profile import Profile
from engine.model.chat_template import ChatMessage
from engine.model.image_input import ImageFile
from engine.model.model_naming import readable_model_name
from engine.model.prompt_format import AUTO
from engine.planning.placement_choice import (
    PlacementChoice,
)
from engine.planning.plan import Plan
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import LoadedModel

log = logging.getLogger(__name__)

EventCallback = Callable[[EngineEvent], None]


@dataclass(frozen=True)
class _LoadModel:
    params: LoadParams
    plan: Plan | None = None
    profile: Profile | None = None
    prompt_format: str | None = None  # None: the model's setting in the model library
    planned: PlannedLoad | None = None  # with its projector planned in: the model sees images


@dataclass(frozen=True)
class _LoadPlanned:
    request: LoadRequest


@dataclass(frozen=True)
class _UnloadModel:
    pass


@dataclass(frozen=True)
class _StartConversation:
    system_prompt: str | None
    history: tuple[ChatMessage, ...]


@dataclass(frozen=True)
class _SendMessage:
    text: str
    settings: SamplingSettings
    images: tuple[ImageFile, ...] = ()
    thinking: bool | None = None  # think or not, where the template has the switch


@dataclass(frozen=True)
class _Summarize:
    input_folder: Path
    output_folder: Path | None
    settings: SummarySettings


@dataclass(frozen=True)
class _SetBudget:
    vram_budget_bytes: int


@dataclass(frozen=True)
class _SetPlacement:
    choice: PlacementChoice


@dataclass(frozen=True)
class _SetPromptFormat:
    name: str


@dataclass(frozen=True)
class _Stop:
    pass


@dataclass(frozen=True)
class _Wake:
    """An API job arrived: come out of waiting on the queue and serve it."""


@dataclass(frozen=True)
class _CloseApi:
    pass


@dataclass
class _Queued:
    request_id: int
    request: object
    cancel: CancelToken = field(default_factory=CancelToken)


class EngineWorker:
    """Start it, submit requests (each returns its id), read events, shut it down."""

    def __init__(self, on_event: EventCallback, name: str = "shardchat-engine") -> None:
        self._on_event = on_event
        self._queue: queue.Queue[_Queued] = queue.Queue()
        self._deferred: collections.deque[_Queued] = collections.deque()  # waited out a job
        self._ids = itertools.count(1)
        self._pending: dict[int, _Queued] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._resident = ResidentModel()
        self._session: ChatSession | None = None
        self.api = ApiStreams()
        self.api.switch_model = self._switch_for_api
        self._resident.before_close.append(self.api.unloaded)
        self._handlers: dict[type, Callable[[_Queued], None]] = {
            _LoadModel: self._load,
            _LoadPlanned: self._load_planned,
            _UnloadModel: self._unload,
            _StartConversation: self._start_conversation,
            _SendMessage: self._send,
            _SetBudget: self._set_budget,
            _SetPlacement: self._set_placement,
            _SetPromptFormat: self._set_prompt_format,
            _Summarize: self._summarize,
            _Wake: lambda _entry: None,
            _CloseApi: lambda _entry: self.api.close("the server stopped"),
        }

    # --- the caller's side (any thread) ---

    def start(self) -> EngineWorker:
        self._thread.start()
        return self

    def load_model(
        self,
        params: LoadParams,
        plan: Plan | None = None,
        profile: Profile | None = None,
        prompt_format: str | None = None,
        planned: PlannedLoad | None = None,
    ) -> int:
        """Load a model in place of the current one; the conversation carries over.

        With a plan (and the profile it was made from), every llama_decode is timed
        against the plan's prediction and reported with each reply. `prompt_format`
        (engine.model.prompt_format): None takes the model's setting in the model library.
        `planned`: the load with its vision projector planned in (app.load_planning), when
        the caller planned it already, so the model sees images.
        """
        return self._submit(_LoadModel(params, plan, profile, prompt_format, planned))

    def load_planned(self, request: LoadRequest) -> int:
        """Plan the model for this machine here, on the worker, then load it under that plan.

        Planning reads the model's GGUF (seconds for a big tokenizer), which must not
        happen on the GUI thread; ModelLoaded carries the plan.
        """
        return self._submit(_LoadPlanned(request))

    def unload_model(self) -> int:
        return self._submit(_UnloadModel())

    def start_conversation(
        self, system_prompt: str | None = None, history: Sequence[ChatMessage] = ()
    ) -> int:
        return self._submit(_StartConversation(system_prompt, tuple(history)))

    def send_message(
        self,
        text: str,
        settings: SamplingSettings,
        images: Sequence[ImageFile] = (),
        thinking: bool | None = None,
    ) -> int:
        """A user message (with images for a model that has a projector); the reply streams.

        `thinking` turns a reasoning model's thinking on or off where its template has
        the switch (None: the template's default)."""
        return self._submit(_SendMessage(text, settings, tuple(images), thinking))

    def set_budget(self, vram_budget_bytes: int) -> int:
        """Re-plan the loaded model for a new VRAM budget; reload only if the placement moves.

        A placement chosen by hand stays while it fits; when it does not, the planner's
        choice runs (PlacementFellBack says why) until a budget it fits comes back.

        Queued like every request, so a reply being generated finishes first (or
        cancel it); the conversation is carried into the reloaded model whole.
        """
        return self._submit(_SetBudget(vram_budget_bytes))

    def set_placement(self, choice: PlacementChoice) -> int:
        """Re-plan the loaded model under a placement chosen by hand (or the planner's), at
        the current budget; reload only if the placement moves.

        A manual placement that does not fit the budget is refused (RequestFailed, bad
        input, with what it needs) and the loaded model stays as it was: the user asked
        for exactly that placement, so it is never shrunk behind their back. Queued like
        set_budget, so a reply in progress finishes first.
        """
        return self._submit(_SetPlacement(choice))

    def set_prompt_format(self, name: str) -> int:
        """Write the loaded model's prompts in another format from its next turn on
        (PromptFormatChosen says which and why); an unknown name is refused (bad input)."""
        return self._submit(_SetPromptFormat(name))

    def summarize(
        self, input_folder: Path, output_folder: Path | None, settings: SummarySettings
    ) -> int:
        """Summarise a folder with the loaded model (JobProgressed events, then JobFinished).

        Chat shares the worker with the job: between the job's decode steps, waiting
        chat requests are served first, so a reply is never stuck behind a folder.
        Cancel the request to pause; submitting the same job again resumes it.
        """
        return self._submit(_Summarize(input_folder, output_folder, settings))

    def serve_api(self, job: ApiJob) -> None:
        """Run an API request (from the server's thread); its events go to `job.sink`.

        API requests do not queue behind chat: they run in a pool of sequences of
        their own, one step at a time between the steps of whatever else runs."""
        self.api.submit(job)
        self._queue.put(_Queued(0, _Wake()))

    def close_api(self) -> None:
        """End the API's requests and free the pool's KV cache (the server stopped)."""
        self._submit(_CloseApi())

    def cancel(self, request_id: int | None = None) -> None:
        """Cancel one request, or every queued and running one when no id is given."""
        with self._lock:
            targets = list(self._pending.values())
        for entry in targets:
            if request_id is None or entry.request_id == request_id:
                entry.cancel.cancel()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Cancel what runs, stop the thread and free the model."""
        if not self._thread.is_alive():
            return
        self.cancel()
        self._queue.put(_Queued(0, _Stop()))
        self._thread.join(timeout)

    @property
    def is_running(self) -> bool:
        return self._thread.is_alive()

    def _submit(self, request: object) -> int:
        entry = _Queued(next(self._ids), request)
        with self._lock:
            self._pending[entry.request_id] = entry
        self._queue.put(entry)
        return entry.request_id

    # --- the worker thread ---

    def _run(self) -> None:
        try:
            while True:
                entry = self._next()
                if entry is None:
                    self._api_step(may_switch=True)
                    continue
                if isinstance(entry.request, _Stop):
                    break
                self._execute(entry)
        finally:
            self.api.close("the engine stopped")
            self._resident.close()

    def _next(self) -> _Queued | None:
        """The next request; None while API streams run and nothing else waits."""
        if self._deferred:
            return self._deferred.popleft()
        if not self.api.busy:
            return self._queue.get()
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None

    def _api_step(self, may_switch: bool = False) -> None:
        """One step of the API's streams (called between every other activity's steps).

        Only between activities (`may_switch`) may an API request load another model:
        inside a chat turn's or a job's step, their model must stay."""
        try:
            self.api.step(self._resident.model, self._resident.plan, may_switch)
        except Exception:  # a bug must not kill the worker: end the API's streams
            log.exception("API step failed")
            self.api.close("internal error while generating")

    def _serve_chat_waiting(self) -> None:
        """During a job: run waiting chat requests now; keep the rest for after the job."""
        while True:
            try:
                entry = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(entry.request, _SendMessage | _StartConversation):
                self._execute(entry)
            elif not isinstance(entry.request, _Wake):
                self._deferred.append(entry)
        self._api_step()

    def _execute(self, entry: _Queued) -> None:
        try:
            self._handlers[type(entry.request)](entry)
        except BadInputError as exc:
            self._emit(RequestFailed(entry.request_id, str(exc), bad_input=True))
        except Exception as exc:  # a bug must not kill the worker: report it and go on
            log.exception("request %d failed", entry.request_id)
            self._emit(RequestFailed(entry.request_id, f"internal error: {exc}", bad_input=False))
        finally:
            with self._lock:
                self._pending.pop(entry.request_id, None)

    def _emit(self, event: EngineEvent) -> None:
        try:
            self._on_event(event)
        except Exception:
            log.exception("event callback failed on %r", event)

    def _load(self, entry: _Queued) -> None:
        request: _LoadModel = entry.request  # type: ignore[assignment]
        self._load_under(
            entry.request_id, request.params, request.plan, request.profile, request.planned,
            prompt_format_for(request.params.model_path, request.prompt_format),
        )  # fmt: skip

    def _load_planned(self, entry: _Queued) -> None:
        request: _LoadPlanned = entry.request  # type: ignore[assignment]
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
        self._serve_api_between_steps(model)
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
                general_name=inventory.name,
            )
        )

    def _switch_for_api(self, model_path: str, mmproj_path: str | None) -> None:
        """Load the model an API request names (the server allows switching), planned as the
        current one is: the same context, threads, profile and budget."""
        current, plan = self._resident.model, self._resident.plan
        params = current.params if current is not None else None
        request = LoadRequest(
            model_path,
            params.n_ctx if params is not None else 4096,
            self._resident.profile,
            plan.request.vram_budget_bytes if plan is not None else None,
            mmproj_path,
            n_threads=params.n_threads if params is not None else None,
        )
        self._load_planned(_Queued(0, _LoadPlanned(request)))

    def _serve_api_between_steps(self, model: LoadedModel) -> None:
        """A chat or vision turn on this model lets the API's streams take a step between
        each of its own; the API serves the model from now on."""
        model.scheduler.between_steps = self._api_step
        self.api.loaded(model)

    def _set_prompt_format(self, entry: _Queued) -> None:
        request: _SetPromptFormat = entry.request  # type: ignore[assignment]
        chosen = self._resident.use_prompt_format(request.name)
        self._emit(
            PromptFormatChosen(entry.request_id, chosen.name, chosen.kind.value, chosen.reason)
        )

    def _set_budget(self, entry: _Queued) -> None:
        request: _SetBudget = entry.request  # type: ignore[assignment]
        # a placement chosen by hand (it rides in the plan) is kept while it fits
        self._replan_loaded(entry.request_id, request.vram_budget_bytes, None)

    def _set_placement(self, entry: _Queued) -> None:
        request: _SetPlacement = entry.request  # type: ignore[assignment]
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
            self._serve_api_between_steps(self._resident.require())
        if outcome.fell_back is not None:
            self._emit(PlacementFellBack(request_id, outcome.wanted, outcome.fell_back))
        plan = outcome.plan
        self._emit(
            PlanChanged(
                request_id, budget_bytes, outcome.reloaded, plan.reason,
                plan.predicted_decode_tokens_per_s, plan.predicted_ttft_s,
                plan.n_gpu_layers, plan, outcome.planner_plan,
            )
        )  # fmt: skip

    def _summarize(self, entry: _Queued) -> None:
        request: _Summarize = entry.request  # type: ignore[assignment]
        model = self._resident.require()
        with JobStore() as store:
            job = SummaryJob(
                model, request.input_folder, request.output_folder, request.settings, store,
                progress=lambda progress: self._emit(JobProgressed(entry.request_id, progress)),
                cancel=entry.cancel, between_steps=self._serve_chat_waiting,
                plan=self._resident.plan, profile=self._resident.profile,
            )  # fmt: skip
            outcome = job.run()
        self._emit(JobFinished(entry.request_id, outcome))

    def _unload(self, entry: _Queued) -> None:
        model = self._resident.model
        path = model.params.model_path if model else None
        self._resident.close()  # the conversation stays, for the next model
        self._emit(ModelUnloaded(entry.request_id, path))

    def _start_conversation(self, entry: _Queued) -> None:
        request: _StartConversation = entry.request  # type: ignore[assignment]
        self._session = ChatSession(
            self._resident.require(), request.system_prompt, request.history
        )
        self._emit(ConversationStarted(entry.request_id, len(self._session.messages)))

    def _send(self, entry: _Queued) -> None:
        request: _SendMessage = entry.request  # type: ignore[assignment]
        model = self._resident.require()
        if self._session is None:
            self._session = ChatSession(model)
        reply = self._session.reply(
            request.text,
            request.settings,
            entry.cancel,
            on_text=lambda text: self._emit(TokenStreamed(entry.request_id, text)),
            images=request.images,
            thinking=request.thinking,
            on_thinking=lambda text: self._emit(TokenStreamed(entry.request_id, "", text)),
        )
        steps = self._resident.drain_steps()
        self._emit(
            ReplyFinished(
                entry.request_id,
                reply.text,
                reply.stats,
                reply.dropped_messages,
                steps,
                model.n_ctx,
                reply.thinking,
            )  # fmt: skip
        )
