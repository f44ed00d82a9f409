"""The engine as its callers see it: requests in, each with an id, and events out.

The window and the commands talk to one of two engines through these calls: the
worker in this process (app.engine_host.worker), or, for a model split onto lent computers, a
worker in a child process (app.engine_host.child_engine) behind the window's router
(app.engine_host.engine_router), because llama.cpp's RPC client aborts the process that uses a
lent computer when that computer dies. Each call only queues a request value
(app.engine_host.engine_requests); the engine answers with events (app.engine_host.events)
naming its id.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app.engine_host.engine_requests import (
    CloseApi,
    LoadModel,
    LoadPlanned,
    SendMessage,
    SetBudget,
    SetPlacement,
    SetPromptFormat,
    StartConversation,
    Summarize,
    UnloadModel,
)
from app.model_lifecycle.load_planning import LoadRequest, PlannedLoad
from app.stores.stored_history import StoredHistory
from engine.generation.sampling import SamplingSettings
from engine.llama.load_params import LoadParams
from engine.machine.profile import Profile
from engine.model.chat_message import ChatMessage
from engine.model.image_input import ImageFile
from engine.planning.placement_choice import PlacementChoice
from engine.planning.plan import Plan

if TYPE_CHECKING:  # the summary job's modules load when a summary runs
    from app.summaries.summary_job import SummarySettings


class EngineClient(ABC):
    """Submit requests (each returns its id), cancel them, shut the engine down."""

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
        `planned`: the load with its vision projector planned in
        (app.model_lifecycle.load_planning), when the caller planned it already, so the model
        sees images.
        """
        return self._submit(LoadModel(params, plan, profile, prompt_format, planned))

    def load_planned(self, request: LoadRequest) -> int:
        """Plan the model for this machine here, on the worker, then load it under that plan.

        Planning reads the model's GGUF (seconds for a big tokenizer), which must not
        happen on the GUI thread; ModelLoaded carries the plan.
        """
        return self._submit(LoadPlanned(request))

    def unload_model(self) -> int:
        return self._submit(UnloadModel())

    def start_conversation(
        self,
        system_prompt: str | None = None,
        history: Sequence[ChatMessage] | StoredHistory = (),
    ) -> int:
        """A new conversation on the loaded model; `history` as a StoredHistory is read on
        the engine's thread (a long chat's read must not hold up the window)."""
        stored = history if isinstance(history, StoredHistory) else tuple(history)
        return self._submit(StartConversation(system_prompt, stored))

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
        return self._submit(SendMessage(text, settings, tuple(images), thinking))

    def set_budget(self, vram_budget_bytes: int) -> int:
        """Re-plan the loaded model for a new VRAM budget; reload only if the placement moves.

        A placement chosen by hand stays while it fits; when it does not, the planner's
        choice runs (PlacementFellBack says why) until a budget it fits comes back.

        Queued like every request, so a reply being generated finishes first (or
        cancel it); the conversation is carried into the reloaded model whole.
        """
        return self._submit(SetBudget(vram_budget_bytes))

    def set_placement(self, choice: PlacementChoice) -> int:
        """Re-plan the loaded model under a placement chosen by hand (or the planner's), at
        the current budget; reload only if the placement moves.

        A manual placement that does not fit the budget is refused (RequestFailed, bad
        input, with what it needs) and the loaded model stays as it was: the user asked
        for exactly that placement, so it is never shrunk behind their back. Queued like
        set_budget, so a reply in progress finishes first.
        """
        return self._submit(SetPlacement(choice))

    def set_prompt_format(self, name: str) -> int:
        """Write the loaded model's prompts in another format from its next turn on
        (PromptFormatChosen says which and why); an unknown name is refused (bad input)."""
        return self._submit(SetPromptFormat(name))

    def summarize(
        self, input_folder: Path, output_folder: Path | None, settings: SummarySettings
    ) -> int:
        """Summarise a folder with the loaded model (JobProgressed events, then JobFinished).

        The job's documents share the model's steps with the conversation and API
        clients, so a reply is never stuck behind a folder. Cancel the request to
        pause; submitting the same job again resumes it.
        """
        return self._submit(Summarize(input_folder, output_folder, settings))

    def close_api(self) -> None:
        """End the API's requests and free the pool's KV cache (the server stopped)."""
        self._submit(CloseApi())

    @abstractmethod
    def cancel(self, request_id: int | None = None) -> None:
        """Cancel one request, or every queued and running one when no id is given."""

    @abstractmethod
    def shutdown(self, timeout: float = 10.0) -> None:
        """Cancel what runs, stop the engine and free the model."""

    @property
    @abstractmethod
    def is_running(self) -> bool: ...

    @abstractmethod
    def _submit(self, request: object) -> int:
        """Queue one request value; its id, which every event answering it names."""
