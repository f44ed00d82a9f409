"""The chat window's controller: the one object the app wires, owning the parts that each do
one job of the chat.

Each part renders what app.conversation's state decides, on the GUI thread:
ChatSending (send, stream, stop), ModelLoadingController (which model, and how
its loads went), ShownConversation (the messages and settings shown, and what
the model is given of them), ConversationListController (new, delete, switch,
rename, search), ChatExportController (File → Export) and MessageActions (edit,
regenerate, delete a message). This class keeps what the rest of the app reads
and calls, and answers the engine events that touch several parts, so the order
in which they change lives in one place. Nothing here waits on the model: the
engine is reached only through the worker's queue.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal, SignalInstance
from PySide6.QtWidgets import QInputDialog

from app.conversation.chat_state import ChatState
from app.conversation.model_status import ModelStatus
from app.engine_host.engine_client import EngineClient
from app.engine_host.events import ModelLoaded, ReplyFinished, RequestFailed
from app.model_lifecycle.load_planning import LoadRequest, PlannedLoad
from app.stores.chat_store import ChatStore
from engine.generation.sampling import SamplingSettings
from engine.machine.profile import Profile
from engine.planning.plan import Plan
from ui.chat.chat_export_controller import ChatExportController
from ui.chat.chat_sending import ChatSending
from ui.chat.conversation_list_controller import ConversationListController
from ui.chat.message_actions import MessageActions
from ui.chat.model_loading_controller import ModelLoadingController
from ui.chat.shown_conversation import ShownConversation
from ui.engine_bridge import EngineBridge
from ui.window.main_window import MainWindow


class ChatController(QObject):
    plan_used = Signal(object)  # Plan | None: the plan of the model being loaded

    def __init__(
        self,
        window: MainWindow,
        worker: EngineClient,
        bridge: EngineBridge,
        store: ChatStore,
        load: LoadRequest | PlannedLoad,
        settings: SamplingSettings,
    ) -> None:
        """`load` is planned on the worker (a LoadRequest), or already planned (tests, benches)."""
        super().__init__(window)
        self.window, self.worker, self.bridge, self.store = window, worker, bridge, store
        self._first_load = load
        self.model = ModelStatus(load)
        self.state = ChatState(store, settings, self.model)
        # the list stops and opens through the parts made before it; sending reaches it late
        self.sending = ChatSending(
            window, worker, self.state, retitled=lambda: self.conversations.refresh_list()
        )
        self.loading = ModelLoadingController(
            window, worker, self.model, self.sending.make_way_for_load, self.plan_used.emit
        )
        self.shown = ShownConversation(window, worker, self.state, self.loading.reload_for_context)
        self.conversations = ConversationListController(
            window, self.state, self.stop, self.shown.open
        )
        self.export = ChatExportController(window, store, self.state)
        self.actions = MessageActions(
            window, worker, self.state, self.sending.send, self.shown.open
        )
        self._connect()

    def _connect(self) -> None:
        w, b = self.window, self.bridge
        w.input.submitted.connect(self.sending.submit)
        w.send_button.clicked.connect(w.input.submit)
        w.input.stop_requested.connect(self.stop)
        w.stop_button.clicked.connect(self.stop)
        w.stop_action.triggered.connect(self.stop)  # Esc anywhere in the window
        w.regenerate_button.clicked.connect(self.regenerate)
        w.edit_button.clicked.connect(self.edit_last)
        w.chat_view.edit_requested.connect(self.actions.edit_message)
        w.chat_view.delete_requested.connect(self.delete_message)
        w.chat_view.set_image_source(self.store.image)
        for signal, slot in self._engine_slots():
            signal.connect(slot)
        b.prompt_format_chosen.connect(self.loading.show_format_chosen)

    def _engine_slots(self) -> tuple[tuple[SignalInstance, Callable[..., None]], ...]:
        b, sending = self.bridge, self.sending
        return (
            (b.model_loaded, self._on_model_loaded), (b.token_streamed, sending.show_token),
            (b.thinking_streamed, sending.show_thinking),
            (b.reply_finished, self._on_reply_finished),
            (b.request_failed, self._on_failed), (b.engine_lost, self.loading.engine_lost),
        )  # fmt: skip

    # --- what the rest of the app reads ---

    @property
    def conversation_id(self) -> int | None:
        return self.state.conversation_id

    @property
    def model_ready(self) -> bool:
        return self.model.ready

    @property
    def model_name(self) -> str:
        return self.model.name

    @property
    def vision(self) -> str | None:
        """The VLMOpt choices while the model sees images."""
        return self.model.vision

    @property
    def _settings(self) -> SamplingSettings:
        """The app's sampling defaults (tests set them)."""
        return self.state.defaults

    @_settings.setter
    def _settings(self, settings: SamplingSettings) -> None:
        self.state.defaults = settings

    @property
    def reply_editor(self) -> QInputDialog | None:
        """The open "Edit reply" dialog."""
        return self.actions.reply_editor

    def model_path(self) -> str:
        """The model loaded, or being loaded."""
        return self.model.model_path

    def loaded_model(self) -> tuple[str | None, str | None]:
        """The model loaded and ready, and its projector; (None, None) while none is."""
        return (self.model.model_path, self.model.mmproj) if self.model.ready else (None, None)

    def planning_inputs(self) -> tuple[Profile | None, int | None, int]:
        """The profile, VRAM budget (None before a plan) and context length loads are planned
        with now; the Discover page predicts a remote model's speed with the same."""
        n_ctx = self.state.n_ctx() if self.conversation_id is not None else self.model.n_ctx
        return self.model.profile, self.model.budget(), n_ctx

    # --- what the rest of the app calls ---

    def start(self, conversation_id: int | None = None, loading: int | None = None) -> None:
        """Recover what a crash left, open the given (else newest) conversation, load the model
        (`loading`: the id of its load, queued already by whoever started the engine)."""
        self.state.open_first(conversation_id)
        self.conversations.refresh_list()
        self.shown.show_conversation()
        self.loading.start(self._first_load, loading)

    def shutdown(self) -> None:
        """The app is closing: keep what the reply said so far, and hear no more events."""
        for signal, slot in self._engine_slots():
            signal.disconnect(slot)
        w = self.window
        w.chat_view.shutdown()
        for widget in (w.settings, w.conversations, w.search, w.input):
            widget.blockSignals(True)  # closing must not read as edits (focus-out, selection)
        self.state.close()

    def load_model(self, model_path: str, mmproj: str | None = None) -> None:
        self.loading.load_model(model_path, mmproj)

    def use_profile(
        self, profile: Profile | None, model_path: str | None = None, mmproj: str | None = None
    ) -> None:
        self.loading.use_profile(profile, model_path, mmproj)

    def use_plan(self, plan: Plan) -> None:
        self.loading.use_plan(plan)

    def use_prompt_format(self, model_path: str, name: str) -> None:
        self.loading.use_prompt_format(model_path, name)

    def reload_model(self) -> None:
        self.loading.reload_model()

    def stop(self) -> None:
        self.sending.stop()

    def new_conversation(self) -> None:
        self.conversations.new_conversation()

    def export_to(self, path: Path) -> Path | None:
        return self.export.export_to(path)

    def regenerate(self) -> None:
        self.actions.regenerate()

    def edit_last(self) -> None:
        self.actions.edit_last()

    def delete_message(self, index: int) -> None:
        self.actions.delete_message(index)
        self.shown.show_empty_state()

    # --- engine events whose answer crosses parts (GUI thread, queued) ---

    def _on_model_loaded(self, event: ModelLoaded) -> None:
        if not self.loading.show_loaded(event, self.state.context_used):
            return
        if self.conversation_id is not None:
            self.shown.open(redraw=False)
        self.shown.show_empty_state()
        if self.state.held is not None and self.model.ready:  # else a reload for its context comes
            self.sending.ask_held()

    def _on_reply_finished(self, event: ReplyFinished) -> None:
        if self.sending.finish(event):
            self.conversations.refresh_list()
            self.shown.apply_context_length()

    def _on_failed(self, event: RequestFailed) -> None:
        if event.request_id == self.model.request_id and not self.loading.show_load_failed(event):
            self.stop()  # a message held for this model is never asked; it stays saved
            self.window.input.setEnabled(False)
            self.shown.show_empty_state()
        self.sending.fail(event)
