"""Which model the chat runs on: queue its loads and say how each went.

Every load (the first, a switch, a new profile, another context length, a
lost engine) goes through one path, so the model line, the plan line and the
input say the same thing whatever asked for it. Planning and loading run on the
worker; the GUI thread only queues them and renders ModelStatus's answers.
"""

from __future__ import annotations

from collections.abc import Callable

from app.conversation.model_status import ModelStatus
from app.engine_host.engine_client import EngineClient
from app.engine_host.events import EngineLost, ModelLoaded, PromptFormatChosen, RequestFailed
from app.model_lifecycle.load_planning import LoadRequest, PlannedLoad
from app.screen_text.plan_words import plan_in_words, split_in_words
from engine.machine.profile import Profile
from engine.planning.plan import Plan
from ui.window.main_window import MainWindow


class ModelLoadingController:
    def __init__(
        self,
        window: MainWindow,
        worker: EngineClient,
        model: ModelStatus,
        make_way: Callable[[], None],
        plan_used: Callable[[Plan | None], None],
    ) -> None:
        """`make_way`: what a load must end first (the old model is freed); `plan_used`:
        told the plan of each model loaded (the VRAM panel shows it)."""
        self.window, self.worker, self.model = window, worker, model
        self._make_way, self._plan_used = make_way, plan_used

    def start(self, load: LoadRequest | PlannedLoad, queued: int | None) -> None:
        """The first load; `queued`: its id, when whoever started the engine queued it."""
        if queued is None:
            self.load(load)
        else:
            self._begin(load)
            self.model.request_id = queued

    def load_model(self, model_path: str, mmproj: str | None = None) -> None:
        """Switch to another model (with its projector, if paired) under the same budget;
        the open conversation carries over."""
        self.load(self.model.request(model_path=model_path, mmproj=mmproj))

    def use_profile(
        self, profile: Profile | None, model_path: str | None = None, mmproj: str | None = None
    ) -> None:
        """This machine was (re)profiled: plan again from the new figures and reload."""
        self.load(self.model.reprofiled(profile, model_path, mmproj))

    def use_plan(self, plan: Plan) -> None:
        """The engine re-planned (a new VRAM budget): show it, and plan later loads with it."""
        self.model.plan = plan
        self.window.plan_label.setText(plan_in_words(plan))
        self.window.vram_panel.show_last_speed("")  # measured under the old plan

    def use_prompt_format(self, model_path: str, name: str) -> None:
        """A model's prompt-format setting changed: the loaded model follows it at once."""
        if self.model.is_loaded(model_path):
            self.worker.set_prompt_format(name)

    def reload_model(self) -> None:
        """Load the current model again (where it runs changed); the conversation carries
        over, as after any load."""
        self.load(self.model.request())

    def reload_for_context(self, n_ctx: int) -> None:
        """A context length is a load-time parameter: re-plan (the KV cache moves) and reload."""
        self.window.statusBar().showMessage(f"reloading the model with {n_ctx} tokens of context")
        self.load(self.model.request(n_ctx))

    def load(self, load: LoadRequest | PlannedLoad) -> None:
        """Queue the load (the old model is freed first). The input stays open: a message
        sent before ModelLoaded is held, and asked once the model has loaded."""
        self._make_way()
        self._begin(load)
        if isinstance(load, PlannedLoad):
            self.model.request_id = self.worker.load_model(load.params, load.plan, load.profile)
        else:
            self.model.request_id = self.worker.load_planned(load)

    def _begin(self, load: LoadRequest | PlannedLoad) -> None:
        """A load is on its way: say so, and keep the input open."""
        self.model.begin(load)
        self.window.model_label.setText(self.model.label)
        self.window.plan_label.setText("planning…" if load.profile else plan_in_words(None))
        self.window.input.setEnabled(True)  # closed only while no model is on its way

    # --- engine events (GUI thread, queued) ---

    def show_loaded(self, event: ModelLoaded, context_used: int) -> bool:
        """Whether the model loaded is the one asked for last: only then is the chat its.
        `context_used`: what the open conversation fills of the new context window."""
        if not self.model.loaded(event):
            return False
        w = self.window
        w.plan_label.setText(
            split_in_words(event.split) if event.split else plan_in_words(event.plan)
        )
        w.vram_panel.show_last_speed("")
        w.show_context(context_used, event.n_ctx)
        self._plan_used(event.plan)
        w.model_label.setText(self.model.label)
        w.model_label.setToolTip(self.model.tooltip())
        if event.vision_problem:
            w.statusBar().showMessage(f"loaded without vision: {event.vision_problem}", 12000)
        w.input.setEnabled(True)
        w.input.setFocus()
        return True

    def show_load_failed(self, event: RequestFailed) -> bool:
        """Whether a model is still loaded: a refused file leaves the current one (the worker
        checks first), and the chat keeps it."""
        kept = self.model.load_failed(event)
        self.window.model_label.setText(self.model.label)
        if kept:
            self.window.plan_label.setText(plan_in_words(self.model.plan))
            self.window.input.setEnabled(True)
        return kept

    def show_format_chosen(self, event: PromptFormatChosen) -> None:
        said = self.model.format_chosen(event)
        self.window.model_label.setText(self.model.label)  # "base model: ..." follows the format
        self.window.model_label.setToolTip(self.model.tooltip())
        self.window.statusBar().showMessage(said, 8000)

    def engine_lost(self, event: EngineLost) -> None:
        """A split model's engine process died (its reply ended with RequestFailed first):
        the conversation is the window's, so the model loads again without what died."""
        self.window.statusBar().showMessage(event.message, 15000)
        if event.reload:
            self.load(self.model.request())
