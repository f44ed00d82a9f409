"""What the chat window does: send, stream, stop, switch and save conversations.

The controller lives on the GUI thread and only wires: the window's widgets
and the engine bridge's queued signals in, app.conversation's state decides,
the widgets render what it says. It talks to the engine only through the
worker's queue, so the window never waits on the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal, SignalInstance
from PySide6.QtWidgets import QFileDialog, QInputDialog, QListWidgetItem

from app.conversation.chat_state import WAIT_FOR_MODEL, WAIT_FOR_REPLY, ChatState
from app.conversation.message_row import MessageRow
from app.conversation.model_status import ModelStatus
from app.engine_client import EngineClient
from app.events import (
    EngineLost,
    ModelLoaded,
    PromptFormatChosen,
    ReplyFinished,
    RequestFailed,
)
from app.model_lifecycle.load_planning import LoadRequest, PlannedLoad
from app.screen_text.plan_words import plan_in_words, speed_against_plan, split_in_words
from app.stores.chat_store import ChatStore
from engine.errors import BadInputError
from engine.generation.sampling import SamplingSettings
from engine.machine.profile import Profile
from engine.model.image_input import ImageFile
from engine.planning.plan import Plan
from ui.engine_bridge import EngineBridge
from ui.image_viewer import ImageViewer
from ui.main_window import CONVERSATION_ID, MainWindow
from ui.message_actions import MessageActions

EMPTY_CHAT_TITLE = "What can I help with?"
EMPTY_CHAT_LINES = (
    "Ask a question, paste text to summarise, or drop an image on the window.",
    "Try: “Explain how a heat pump works, with a table of pros and cons”",
    "Try: “Write a Python function that merges two sorted lists”",
    "Enter sends · Shift+Enter adds a line · Esc stops a reply",
)
SENT_WHEN_LOADED = "the model is loading: your message goes to it as soon as it has loaded"
NO_MODEL_TITLE = "No model loaded"
NO_MODEL_LINES = (
    "Tools → Models → Discover (Ctrl+Shift+M) finds a model on Hugging Face, says how fast",
    "each of its quants would run here, and downloads it.",
    "Tools → Models (Ctrl+M) imports a GGUF model from disk, or drop a .gguf file here.",
)


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
        self.actions = MessageActions(window, worker, self.state, self.send, self._open)
        self._connect()

    def _connect(self) -> None:
        w, b = self.window, self.bridge
        w.input.submitted.connect(self._on_submitted)
        w.send_button.clicked.connect(w.input.submit)
        w.input.stop_requested.connect(self.stop)
        w.stop_button.clicked.connect(self.stop)
        w.stop_action.triggered.connect(self.stop)  # Esc anywhere in the window
        w.new_chat.clicked.connect(self.new_conversation)
        w.delete_chat.clicked.connect(self.delete_conversation)
        w.regenerate_button.clicked.connect(self.regenerate)
        w.export_action.triggered.connect(self.export_chat)
        w.edit_button.clicked.connect(self.edit_last)
        w.conversations.itemChanged.connect(self._on_item_renamed)
        w.settings.system_prompt_changed.connect(self._on_system_prompt)
        w.settings.sampling_changed.connect(self._on_sampling)
        w.conversations.currentItemChanged.connect(self._on_item_changed)
        w.search.textChanged.connect(lambda _text: self._refresh_list())
        w.chat_view.image_opened.connect(self.show_image)
        w.chat_view.edit_requested.connect(self.edit_message)
        w.chat_view.delete_requested.connect(self.delete_message)
        w.chat_view.older_wanted.connect(self._show_older)
        w.chat_view.set_image_source(self.store.image)
        for signal, slot in self._engine_slots():
            signal.connect(slot)
        b.prompt_format_chosen.connect(self._on_prompt_format_chosen)

    def _engine_slots(self) -> tuple[tuple[SignalInstance, Callable[..., None]], ...]:
        b = self.bridge
        return (
            (b.model_loaded, self._on_model_loaded), (b.token_streamed, self._on_token),
            (b.thinking_streamed, self._on_thinking), (b.reply_finished, self._on_reply_finished),
            (b.request_failed, self._on_failed), (b.engine_lost, self._on_engine_lost),
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

    # --- actions ---

    def start(self, conversation_id: int | None = None, loading: int | None = None) -> None:
        """Recover what a crash left, open the given (else newest) conversation, load the model
        (`loading`: the id of its load, queued already by whoever started the engine)."""
        self.state.open_first(conversation_id)
        self._refresh_list()
        self._show_conversation()
        if loading is None:
            self._load(self._first_load)
        else:
            self._begin(self._first_load)
            self.model.request_id = loading

    def load_model(self, model_path: str, mmproj: str | None = None) -> None:
        """Switch to another model (with its projector, if paired) under the same budget;
        the open conversation carries over."""
        self._load(self.model.request(model_path=model_path, mmproj=mmproj))

    def use_profile(
        self, profile: Profile | None, model_path: str | None = None, mmproj: str | None = None
    ) -> None:
        """This machine was (re)profiled: plan again from the new figures and reload."""
        self._load(self.model.reprofiled(profile, model_path, mmproj))

    def use_plan(self, plan: Plan) -> None:
        """The engine re-planned (a new VRAM budget): show it, and plan later loads with it."""
        self.model.plan = plan
        self.window.plan_label.setText(plan_in_words(plan))
        self.window.vram_panel.show_last_speed("")  # measured under the old plan

    def use_prompt_format(self, model_path: str, name: str) -> None:
        """A model's prompt-format setting changed: the loaded model follows it at once."""
        if self.model.is_loaded(model_path):
            self.worker.set_prompt_format(name)

    def shutdown(self) -> None:
        """The app is closing: keep what the reply said so far, and hear no more events."""
        for signal, slot in self._engine_slots():
            signal.disconnect(slot)
        w = self.window
        w.chat_view.shutdown()
        for widget in (w.settings, w.conversations, w.search, w.input):
            widget.blockSignals(True)  # closing must not read as edits (focus-out, selection)
        self.state.close()

    def _on_submitted(self, text: str) -> None:
        """Text and images from the input; images stay there until a model can see them."""
        attached = self.window.input.attachments()
        why = self.state.cannot_send(bool(attached))
        if why == WAIT_FOR_MODEL and not attached and self.model.coming() and not self.state.reply:
            self._hold(text)
            return
        if why:
            self.window.input.setPlainText(text)  # submit() took the text out: give it back
            self.window.statusBar().showMessage(why, 12000)
            return
        self.window.input.take_attachments()
        self.send(text, [ImageFile(a.name, a.png_bytes) for a in attached])

    def send(self, text: str, images: Sequence[ImageFile] = ()) -> None:
        if self.state.cannot_send():
            self.window.statusBar().showMessage(WAIT_FOR_REPLY, 3000)
            return
        turn = self.state.ask(text, images)
        if turn.retitled:
            self._refresh_list()
        self.window.chat_view.add_message(turn.asked)
        self.window.chat_view.add_message(turn.reply)
        assert self.state.reply is not None
        self.state.reply.request_id = self.worker.send_message(
            text, self.state.sampling(), images, thinking=self.state.thinking()
        )
        self.window.set_busy(True)

    def _hold(self, text: str) -> None:
        """The model is still loading: the message is saved and shown now, and asked as soon
        as the model has loaded (images wait for the model: only it knows if it sees them)."""
        turn = self.state.ask(text)
        if turn.retitled:
            self._refresh_list()
        self.window.chat_view.add_message(turn.asked)
        self.window.chat_view.add_message(turn.reply)
        self.window.set_busy(True)
        self.window.statusBar().showMessage(SENT_WHEN_LOADED, 8000)

    def _ask_held(self) -> None:
        """The model has loaded (and been given the conversation before the held message)."""
        held = self.state.held
        assert held is not None
        held.request_id = self.worker.send_message(
            held.asked, self.state.sampling(), thinking=self.state.thinking()
        )

    def export_chat(self) -> None:
        """File → Export chat as Markdown: where to, then the file (written whole or not at all)."""
        if self.conversation_id is None:
            return
        suggested = str(Path.home() / f"{safe_file_name(self.state.title())}.md")
        path, _filter = QFileDialog.getSaveFileName(
            self.window, "Export chat as Markdown", suggested, "Markdown (*.md)"
        )
        if path:
            self.export_to(Path(path))

    def export_to(self, path: Path) -> Path | None:
        from app.chat_export import export_conversation  # its Markdown parser: when used

        assert self.conversation_id is not None
        try:
            written = export_conversation(self.store, self.conversation_id, path)
        except BadInputError as exc:
            self.window.statusBar().showMessage(str(exc), 12000)
            return None
        self.window.statusBar().showMessage(f"exported the chat to {written}", 8000)
        return written

    def show_image(self, image: ImageFile) -> ImageViewer:
        """A thumbnail in the conversation was clicked: the image, whole, beside the chat."""
        viewer = ImageViewer(image, parent=self.window)
        viewer.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        viewer.open()
        return viewer

    def stop(self) -> None:
        reply = self.state.reply
        if self.state.held is not None:  # never asked: it ends here, empty; the message stays
            row = self.state.failed(None)
            if row is not None:
                self._end_reply(row)
        elif reply is not None and reply.request_id is not None:
            self.worker.cancel(reply.request_id)

    def new_conversation(self) -> None:
        self.stop()
        self.state.new_conversation()
        self.window.search.clear()
        self._refresh_list()
        self._open()

    def delete_conversation(self) -> None:
        """Delete the open conversation and open the newest other one (or a new one)."""
        if self.conversation_id is None or self.state.reply is not None:
            return
        if self.state.delete_open() is None:
            self.new_conversation()
            return
        self._refresh_list()
        self._open()

    # --- what the message buttons and menus do (ui.message_actions) ---

    @property
    def reply_editor(self) -> QInputDialog | None:
        """The open "Edit reply" dialog."""
        return self.actions.reply_editor

    def regenerate(self) -> None:
        self.actions.regenerate()

    def edit_last(self) -> None:
        self.actions.edit_last()

    def edit_message(self, index: int) -> None:
        self.actions.edit_message(index)

    def delete_message(self, index: int) -> None:
        self.actions.delete_message(index)
        self._show_empty_state()

    # --- the side panel and the conversation list ---

    def _on_system_prompt(self, text: str) -> None:
        if self.state.set_system_prompt(text):
            self._open(redraw=False)  # the model hears the new prompt

    def _on_sampling(self, sampling: dict) -> None:
        if self.state.set_sampling(sampling) and self.state.reply is None:
            self._apply_context_length()  # during a reply: when it ends

    def _on_item_changed(self, item: QListWidgetItem | None, _previous: object) -> None:
        if item is not None:
            self.stop()
            self.state.conversation_id = int(item.data(CONVERSATION_ID))
            self._open()

    def _on_item_renamed(self, item: QListWidgetItem) -> None:
        self.state.rename(int(item.data(CONVERSATION_ID)), item.text())

    # --- engine events (GUI thread, queued) ---

    def _on_prompt_format_chosen(self, event: PromptFormatChosen) -> None:
        said = self.model.format_chosen(event)
        self.window.model_label.setText(self.model.label)  # "base model: ..." follows the format
        self.window.model_label.setToolTip(self.model.tooltip())
        self.window.statusBar().showMessage(said, 8000)

    def _on_model_loaded(self, event: ModelLoaded) -> None:
        if not self.model.loaded(event):
            return
        w = self.window
        w.plan_label.setText(
            split_in_words(event.split) if event.split else plan_in_words(event.plan)
        )
        w.vram_panel.show_last_speed("")
        w.show_context(self.state.context_used, event.n_ctx)
        self.plan_used.emit(event.plan)
        w.model_label.setText(self.model.label)
        w.model_label.setToolTip(self.model.tooltip())
        if event.vision_problem:
            w.statusBar().showMessage(f"loaded without vision: {event.vision_problem}", 12000)
        w.input.setEnabled(True)
        w.input.setFocus()
        if self.conversation_id is not None:
            self._open(redraw=False)
        self._show_empty_state()
        if self.state.held is not None and self.model.ready:  # else a reload for its context comes
            self._ask_held()

    def _on_token(self, request_id: int, text: str) -> None:
        reply = self.state.streamed(request_id, text=text)
        if reply is not None:
            self.window.chat_view.show_streaming(reply.text, reply.thinking)

    def _on_thinking(self, request_id: int, thinking: str) -> None:
        reply = self.state.streamed(request_id, thinking=thinking)
        if reply is not None:
            self.window.chat_view.show_streaming(reply.text, reply.thinking)

    def _on_reply_finished(self, event: ReplyFinished) -> None:
        row = self.state.finished(event)
        if row is None:
            return
        self._end_reply(row)
        w, stats = self.window, event.stats
        speed = speed_against_plan(stats.decode_tokens_per_s, self.model.plan, event.steps)
        w.speed_label.setText(
            f"{stats.time_to_first_token_s:.2f} s to first token · {speed} · "
            f"{stats.finish_reason.value} · "
            f"context {event.context_used:,} / {event.context_window:,} tokens"
        )
        w.vram_panel.show_last_speed(speed)
        w.show_context(event.context_used, event.context_window)
        if event.dropped_messages:
            w.statusBar().showMessage(
                f"the {event.dropped_messages} oldest messages were left out of the prompt to "
                "fit the context window; the conversation keeps them",
                12000,
            )
        self._refresh_list()
        self._apply_context_length()

    def _on_failed(self, event: RequestFailed) -> None:
        if event.request_id == self.model.request_id:
            self._on_load_failed(event)
        row = self.state.failed(event.request_id)
        if row is not None:
            self._end_reply(row)
        self.window.statusBar().showMessage(event.message, 8000)

    def _on_engine_lost(self, event: EngineLost) -> None:
        """A split model's engine process died (its reply ended with RequestFailed first):
        the conversation is the window's, so the model loads again without what died."""
        self.window.statusBar().showMessage(event.message, 15000)
        if event.reload:
            self._load(self.model.request())

    def reload_model(self) -> None:
        """Load the current model again (where it runs changed); the conversation carries
        over, as after any load."""
        self._load(self.model.request())

    def _on_load_failed(self, event: RequestFailed) -> None:
        """A refused file leaves the current model loaded (the worker checks first): keep it."""
        kept = self.model.load_failed(event)
        self.window.model_label.setText(self.model.label)
        if not kept:
            self.stop()  # a message held for this model is never asked; it stays saved
            self.window.input.setEnabled(False)
            self._show_empty_state()
            return
        self.window.plan_label.setText(plan_in_words(self.model.plan))
        self.window.input.setEnabled(True)

    def _end_reply(self, row: MessageRow) -> None:
        """The reply is over: its row shows what was saved (the kept text, stats)."""
        self.window.chat_view.finish_streaming(row)
        self.window.set_busy(False)

    # --- opening, loading, rendering ---

    def _open(self, redraw: bool = True) -> None:
        """Show the open conversation and give the model its history; `redraw=False` when only
        the model or its settings changed (the messages shown are the same: drawing a long
        conversation again would cost the GUI thread for nothing)."""
        state = self.state
        self.window.settings.show_settings(state.system_prompt(), state.sampling(), state.n_ctx())
        self.window.settings.show_thinking(
            self.model.thinking_switch, state.thinking() is not False
        )
        if redraw or state.shown_conversation != self.conversation_id:
            self._show_conversation()
        if not self.model.ready:
            return
        if state.needs_reload():
            self._reload_for_context(state.n_ctx())  # reopens this conversation when loaded
            return
        # read on the engine's thread; a held message is asked once it has the rest
        self.worker.start_conversation(None, state.stored_history(state.held is not None))

    def _apply_context_length(self) -> None:
        if self.state.needs_reload():
            self._open(redraw=False)

    def _reload_for_context(self, n_ctx: int) -> None:
        """A context length is a load-time parameter: re-plan (the KV cache moves) and reload."""
        self.window.statusBar().showMessage(f"reloading the model with {n_ctx} tokens of context")
        self._load(self.model.request(n_ctx))

    def _load(self, load: LoadRequest | PlannedLoad) -> None:
        """Queue the load (the old model is freed first). The input stays open: a message
        sent before ModelLoaded is held, and asked once the model has loaded."""
        if self.state.held is None:
            self.stop()
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

    def _show_conversation(self) -> None:
        if self.conversation_id is None:
            return
        rows = self.state.rows()
        self.window.chat_view.show_messages(rows, more_above=self.state.more_above)
        window_size = self.model.n_ctx if self.model.ready else 0
        self.window.show_context(self.state.context_used, window_size)
        self._show_empty_state()

    def _show_older(self) -> None:
        """The view reached the top of what was read: the page before it (a few ms)."""
        if self.state.shown_conversation != self.conversation_id:
            return
        rows = self.state.older_rows()
        self.window.chat_view.prepend_messages(rows, more_above=self.state.more_above)

    def _show_empty_state(self) -> None:
        if self.model.coming():
            self.window.chat_view.set_empty_state(EMPTY_CHAT_TITLE, EMPTY_CHAT_LINES)
        else:
            self.window.chat_view.set_empty_state(NO_MODEL_TITLE, NO_MODEL_LINES)

    def _refresh_list(self) -> None:
        items = self.state.listed(self.window.search.text())
        self.window.show_conversations(items, self.conversation_id)


def safe_file_name(title: str) -> str:
    """A conversation title as a file name on every system (no separators or reserved signs)."""
    kept = "".join(c if c.isalnum() or c in " -_." else " " for c in title)
    return " ".join(kept.split())[:80].strip(" .") or "chat"
