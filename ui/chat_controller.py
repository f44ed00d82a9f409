"""What the chat window does: send, stream, stop, switch and save conversations.

The controller lives on the GUI thread. It talks to the engine only through
the worker's queue and hears back through the bridge's queued signals, so the
window never waits on the model. Every message is saved as it happens; a
streamed reply is saved incomplete and refreshed every SAVE_INTERVAL_S, so a
killed app loses at most the reply being generated.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QFileDialog, QInputDialog, QListWidgetItem

from app.chat_export import export_conversation
from app.events import ModelLoaded, PromptFormatChosen, ReplyFinished, RequestFailed
from app.load_planning import LoadRequest, PlannedLoad
from app.plan_words import plan_in_words, speed_against_plan
from app.stores.chat_records import StoredMessage
from app.stores.chat_store import ChatStore
from app.worker import EngineWorker
from engine.errors import BadInputError
from engine.generation.sampling import SamplingSettings
from engine.machine.profile import Profile
from engine.model.image_input import ImageFile
from engine.planning.plan import Plan
from ui.conversation_model import MessageRow
from ui.conversation_settings import THINKING_KEY
from ui.engine_bridge import EngineBridge
from ui.image_attachments import image_from_bytes
from ui.image_viewer import ImageViewer
from ui.main_window import CONVERSATION_ID, MainWindow

SAVE_INTERVAL_S = 0.5
N_CTX_KEY = "n_ctx"  # a conversation's context length, kept with its sampling settings
NEW_TITLE = "New chat"
EMPTY_CHAT_TITLE = "What can I help with?"
EMPTY_CHAT_LINES = (
    "Ask a question, paste text to summarise, or drop an image on the window.",
    "Try: “Explain how a heat pump works, with a table of pros and cons”",
    "Try: “Write a Python function that merges two sorted lists”",
    "Enter sends · Shift+Enter adds a line · Esc stops a reply",
)
NO_MODEL_TITLE = "No model loaded"
NO_MODEL_LINES = (
    "Tools → Models → Discover (Ctrl+Shift+M) finds a model on Hugging Face, says how fast",
    "each of its quants would run here, and downloads it.",
    "Tools → Models (Ctrl+M) imports a GGUF model from disk, or drop a .gguf file here.",
)
TITLE_CHARS = 40


class ChatController(QObject):
    plan_used = Signal(object)  # Plan | None: the plan of the model being loaded

    def __init__(
        self,
        window: MainWindow,
        worker: EngineWorker,
        bridge: EngineBridge,
        store: ChatStore,
        load: LoadRequest | PlannedLoad,
        settings: SamplingSettings,
    ) -> None:
        """`load` is planned on the worker (a LoadRequest), or already planned (tests, benches)."""
        super().__init__(window)
        self.window, self.worker, self.bridge, self.store = window, worker, bridge, store
        self._first_load, self._settings = load, settings
        self._model_path, self._loaded_n_ctx = _path_and_context(load)
        self._mmproj = load.mmproj_path  # the paired vision projector, if any
        self._profile = load.profile
        self._plan: Plan | None = None
        self.vision: str | None = None  # the VLMOpt choices while the model sees images
        self._prompt_format = ""  # which prompt format the loaded model got, and why
        self._previous: tuple[str, int, Plan | None, str] | None = None  # kept if a load fails
        self.model_name = ""
        self._default_n_ctx = self._loaded_n_ctx
        self.conversation_id: int | None = None
        self.model_ready = False
        self._load_request: int | None = None
        self._reply_request: int | None = None
        self._reply_message: int | None = None
        self._reply_text = ""
        self._reply_thinking = ""  # a reasoning model's thinking, apart from the answer
        self._thinking_switch = False  # the model's template can be told to think or not
        self._saved_at = 0.0
        self._reply_stats: dict | None = None
        self._load_failed = False
        self._shown_conversation: int | None = None  # the conversation the view shows
        self._context_used = 0  # tokens the shown conversation's last reply filled
        self.reply_editor: QInputDialog | None = None  # the open "Edit reply" dialog
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
        w.chat_view.set_image_source(self.store.image)
        b.model_loaded.connect(self._on_model_loaded)
        b.token_streamed.connect(self._on_token)
        b.thinking_streamed.connect(self._on_thinking)
        b.reply_finished.connect(self._on_reply_finished)
        b.request_failed.connect(self._on_failed)
        b.prompt_format_chosen.connect(self._on_prompt_format_chosen)

    # --- actions ---

    def start(self, conversation_id: int | None = None) -> None:
        """Recover what a crash left, open the given (else newest) conversation, load the model."""
        self.store.discard_incomplete()
        conversations = self.store.conversations()
        if conversation_id in {c.id for c in conversations}:
            self.conversation_id = conversation_id
        elif conversations:
            self.conversation_id = conversations[0].id
        else:
            self.conversation_id = self.store.create_conversation(NEW_TITLE).conversation_id
        self._refresh_list()
        self._show_conversation()
        self._load(self._first_load)

    def load_model(self, model_path: str, mmproj: str | None = None) -> None:
        """Switch to another model (with its projector, if paired) under the same budget;
        the open conversation carries over."""
        self._load(
            LoadRequest(model_path, self._loaded_n_ctx, self._profile, self._budget(), mmproj)
        )

    def model_path(self) -> str:
        """The model loaded, or being loaded."""
        return self._model_path

    def loaded_model(self) -> tuple[str | None, str | None]:
        """The model loaded and ready, and its projector; (None, None) while none is."""
        return (self._model_path, self._mmproj) if self.model_ready else (None, None)

    def planning_inputs(self) -> tuple[Profile | None, int | None, int]:
        """The profile, VRAM budget (None before a plan) and context length loads are planned
        with now; the Discover page predicts a remote model's speed with the same."""
        n_ctx = self._n_ctx() if self.conversation_id is not None else self._loaded_n_ctx
        return self._profile, self._budget(), n_ctx

    def use_profile(
        self, profile: Profile | None, model_path: str | None = None, mmproj: str | None = None
    ) -> None:
        """This machine was (re)profiled: plan again from the new figures and reload."""
        if model_path is None:
            model_path, mmproj = self._model_path, self._mmproj
        self._load(LoadRequest(model_path, self._loaded_n_ctx, profile, None, mmproj))

    def use_plan(self, plan: Plan) -> None:
        """The engine re-planned (a new VRAM budget): show it, and plan later loads with it."""
        self._plan = plan
        self.window.plan_label.setText(plan_in_words(plan))
        self.window.vram_panel.show_last_speed("")  # measured under the old plan

    def shutdown(self) -> None:
        """The app is closing: keep what the reply said so far, and hear no more events."""
        b = self.bridge
        for signal, slot in (
            (b.model_loaded, self._on_model_loaded), (b.token_streamed, self._on_token),
            (b.reply_finished, self._on_reply_finished), (b.request_failed, self._on_failed),
            (b.thinking_streamed, self._on_thinking),
        ):  # fmt: skip
            signal.disconnect(slot)
        w = self.window
        w.chat_view.shutdown()
        for widget in (w.settings, w.conversations, w.search, w.input):
            widget.blockSignals(True)  # closing must not read as edits (focus-out, selection)
        if self._reply_request is not None:
            self._save_reply(complete=True)
            self._reply_request = self._reply_message = None

    def _on_submitted(self, text: str) -> None:
        """Text and images from the input; images stay there until a model can see them."""
        attached = self.window.input.attachments()
        why = self._cannot_send(bool(attached))
        if why:
            self.window.input.setPlainText(text)  # submit() took the text out: give it back
            self.window.statusBar().showMessage(why, 12000)
            return
        self.window.input.take_attachments()
        self.send(text, [ImageFile(a.name, a.png_bytes) for a in attached])

    def _cannot_send(self, with_images: bool) -> str:
        """Why a message cannot go now ("" when it can)."""
        if not self.model_ready:
            return "wait for the model to load"
        if self._reply_request is not None:
            return "wait for the current reply (Esc stops it)"
        if with_images and self.vision is None:
            return no_vision_message(self.model_name)
        return ""

    def send(self, text: str, images: Sequence[ImageFile] = ()) -> None:
        if not self.model_ready or self._reply_request is not None:
            self.window.statusBar().showMessage("wait for the current reply (Esc stops it)", 3000)
            return
        assert self.conversation_id is not None
        asked = self.store.add_message(self.conversation_id, "user", text, images=images)
        self._retitle(text)
        change = self.store.add_message(self.conversation_id, "assistant", "", complete=False)
        self._reply_message, self._reply_text = change.message_id, ""
        self._reply_thinking = ""
        view = self.window.chat_view
        names = tuple(image.name for image in images)
        view.add_message(MessageRow(asked.message_id, "user", text, image_names=names))
        view.add_message(MessageRow(change.message_id, "assistant", "", streaming=True))
        self._reply_request = self.worker.send_message(
            text, self._sampling(), images, thinking=self._thinking()
        )
        self.window.set_busy(True)

    def export_chat(self) -> None:
        """File → Export chat as Markdown: where to, then the file (written whole or not at all)."""
        if self.conversation_id is None:
            return
        title = self.store.conversation(self.conversation_id).title
        suggested = str(Path.home() / f"{safe_file_name(title)}.md")
        path, _filter = QFileDialog.getSaveFileName(
            self.window, "Export chat as Markdown", suggested, "Markdown (*.md)"
        )
        if path:
            self.export_to(Path(path))

    def export_to(self, path: Path) -> Path | None:
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
        if self._reply_request is not None:
            self.worker.cancel(self._reply_request)

    def new_conversation(self) -> None:
        self.stop()
        self.conversation_id = self.store.create_conversation(NEW_TITLE).conversation_id
        self.window.search.clear()
        self._refresh_list()
        self._open(self.conversation_id)

    def delete_conversation(self) -> None:
        """Delete the open conversation and open the newest other one (or a new one)."""
        if self.conversation_id is None or self._reply_request is not None:
            return
        self.store.delete(self.conversation_id)
        remaining = self.store.conversations()
        if not remaining:
            self.new_conversation()
            return
        self.conversation_id = remaining[0].id
        self._refresh_list()
        self._open(self.conversation_id)

    def regenerate(self) -> None:
        """Ask again: the last reply goes, the last message (and its images) is sent once more."""
        last = self._last_user_message()
        why = self._cannot_send(bool(last and last.images))
        if last is None or why:
            if why:
                self.window.statusBar().showMessage(why, 12000)
            return
        self._take_back(last)
        self.send(last.content, last.images)

    def edit_last(self) -> None:
        """Put the last message (text and images) back in the input box, with its reply gone."""
        last = self._last_user_message()
        if last is None or self._reply_request is not None or not self.model_ready:
            return
        self._put_back(last)

    def _put_back(self, last: StoredMessage) -> None:
        self._take_back(last)
        self.window.input.setPlainText(last.content)
        try:
            attachments = [image_from_bytes(image.data, image.name) for image in last.images]
        except BadInputError as exc:  # a saved image that no longer decodes: keep the text
            attachments = []
            self.window.statusBar().showMessage(str(exc), 8000)
        self.window.input.add_attachments(attachments)
        self.window.input.setFocus()

    # --- engine events (GUI thread, queued) ---

    def use_prompt_format(self, model_path: str, name: str) -> None:
        """A model's prompt-format setting changed: the loaded model follows it at once."""
        if self.model_ready and Path(model_path).resolve() == Path(self._model_path).resolve():
            self.worker.set_prompt_format(name)

    def _on_prompt_format_chosen(self, event: PromptFormatChosen) -> None:
        self._prompt_format = f"Prompt format: {event.name} ({event.reason})"
        self._show_model_tooltip()
        self.window.statusBar().showMessage(self._prompt_format, 8000)

    def _show_model_tooltip(self) -> None:
        vision = [f"Vision: {self.vision}"] if self.vision else []
        self.window.model_label.setToolTip("\n".join([self._prompt_format, *vision]))

    def _on_model_loaded(self, event: ModelLoaded) -> None:
        if event.request_id != self._load_request:
            return
        self.model_ready = True
        self._plan = event.plan
        self.window.plan_label.setText(plan_in_words(event.plan))
        self.window.vram_panel.show_last_speed("")
        self.window.show_context(self._context_used, event.n_ctx)
        self.plan_used.emit(event.plan)
        self.model_name = event.model_name
        self.vision = event.vision
        self._thinking_switch = event.thinking_switch
        sees = " · sees images" if event.vision else ""
        self.window.model_label.setText(
            f"{event.model_name} · {event.architecture} · {event.n_ctx} tokens{sees}"
        )
        self._prompt_format = f"Prompt format: {event.prompt_format} ({event.prompt_format_reason})"
        self._show_model_tooltip()
        if event.vision_problem:
            self.window.statusBar().showMessage(
                f"loaded without vision: {event.vision_problem}", 12000
            )
        self.window.input.setEnabled(True)
        self.window.input.setFocus()
        self._load_failed = False
        if self.conversation_id is not None:
            self._open(self.conversation_id, redraw=False)
        self._show_empty_state()

    def _on_token(self, request_id: int, text: str) -> None:
        if request_id != self._reply_request:
            return
        self._reply_text += text
        self.window.chat_view.show_streaming(self._reply_text, self._reply_thinking)
        if time.monotonic() - self._saved_at > SAVE_INTERVAL_S:
            self._save_reply(complete=False)

    def _on_thinking(self, request_id: int, thinking: str) -> None:
        if request_id != self._reply_request:
            return
        self._reply_thinking += thinking
        self.window.chat_view.show_streaming(self._reply_text, self._reply_thinking)
        if time.monotonic() - self._saved_at > SAVE_INTERVAL_S:
            self._save_reply(complete=False)

    def _on_reply_finished(self, event: ReplyFinished) -> None:
        if event.request_id != self._reply_request:
            return
        self._reply_text, self._reply_thinking = event.text, event.thinking
        self._reply_stats = event.stats.to_dict()
        self._save_reply(complete=True, stats=self._reply_stats)
        self._end_reply()
        stats = event.stats
        speed = speed_against_plan(stats.decode_tokens_per_s, self._plan, event.steps)
        self.window.speed_label.setText(
            f"{stats.time_to_first_token_s:.2f} s to first token · {speed} · "
            f"{stats.finish_reason.value} · "
            f"context {event.context_used:,} / {event.context_window:,} tokens"
        )
        self.window.vram_panel.show_last_speed(speed)
        self._context_used = event.context_used
        self.window.show_context(event.context_used, event.context_window)
        if event.dropped_messages:
            self.window.statusBar().showMessage(
                f"the {event.dropped_messages} oldest messages were left out of the prompt to "
                "fit the context window; the conversation keeps them",
                12000,
            )
        self._refresh_list()
        self._apply_context_length()

    def _on_failed(self, event: RequestFailed) -> None:
        if event.request_id == self._load_request:
            self._on_load_failed(event)
        if event.request_id == self._reply_request:
            self._save_reply(complete=True)
            self._end_reply()
        self.window.statusBar().showMessage(event.message, 8000)

    def _on_load_failed(self, event: RequestFailed) -> None:
        """A refused file leaves the current model loaded (the worker checks first): keep it."""
        if not event.bad_input or self._previous is None:
            self.window.model_label.setText("no model loaded")
            self._load_failed = True
            self._show_empty_state()
            return
        self._model_path, self._loaded_n_ctx, self._plan, label = self._previous
        self.model_ready = True
        self.window.model_label.setText(label)
        self.window.plan_label.setText(plan_in_words(self._plan))
        self.window.input.setEnabled(True)

    # --- helpers ---

    def _on_item_changed(self, item: QListWidgetItem | None, _previous: object) -> None:
        if item is not None:
            self.stop()
            self._open(int(item.data(CONVERSATION_ID)))

    def _last_user_message(self) -> StoredMessage | None:
        if self.conversation_id is None:
            return None
        messages = self.store.messages(self.conversation_id, with_images=False)
        last = next((m for m in reversed(messages) if m.role == "user"), None)
        return self._with_images(last) if last is not None else None

    def _with_images(self, message: StoredMessage) -> StoredMessage:
        """The message with its images read (only this message's, not the conversation's)."""
        images = tuple(self.store.image(message.id, i) for i in range(len(message.image_names)))
        return replace(message, images=images)

    def _take_back(self, last: StoredMessage) -> None:
        """Remove a user message and what followed it; the model forgets them too."""
        assert self.conversation_id is not None
        self.store.truncate_after(self.conversation_id, last.position - 1)
        self._open(self.conversation_id)

    def edit_message(self, index: int) -> None:
        """Edit on a message: yours goes back to the input box with what followed it gone
        (as Edit last does); a reply opens in an editor and is saved as corrected."""
        row = self.window.chat_view.conversation.row(index)
        if row.message_id is None or self._reply_request is not None or not self.model_ready:
            return
        if row.role == "user":
            message = self._stored(row.message_id)
            if message is not None:
                self._put_back(self._with_images(message))
            return
        self._open_reply_editor(index, row.message_id, row.text)

    def _open_reply_editor(self, index: int, message_id: int, text: str) -> QInputDialog:
        editor = QInputDialog(self.window)
        editor.setWindowTitle("Edit reply")
        editor.setLabelText("The model will see this text as its reply from now on:")
        editor.setOption(QInputDialog.InputDialogOption.UsePlainTextEditForTextInput)
        editor.setTextValue(text)
        editor.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        editor.textValueSelected.connect(
            lambda edited: self._save_edited_reply(index, message_id, edited)
        )
        editor.open()
        self.reply_editor = editor
        return editor

    def _save_edited_reply(self, index: int, message_id: int, text: str) -> None:
        assert self.conversation_id is not None
        self.store.update_message(message_id, text, complete=True)
        view = self.window.chat_view
        if index < view.conversation.rowCount() and view.conversation.row(index).message_id == (
            message_id
        ):
            view.replace_message(index, MessageRow(message_id, "assistant", text))
        self.worker.start_conversation(None, self.store.history(self.conversation_id))

    def delete_message(self, index: int) -> None:
        """Delete on a message: it goes from the conversation and from what the model sees."""
        view = self.window.chat_view
        row = view.conversation.row(index)
        if row.message_id is None or self._reply_request is not None:
            return
        assert self.conversation_id is not None
        self.store.delete_message(row.message_id)
        view.remove_messages(index)
        if self.model_ready:
            self.worker.start_conversation(None, self.store.history(self.conversation_id))
        self._show_empty_state()

    def _stored(self, message_id: int) -> StoredMessage | None:
        assert self.conversation_id is not None
        messages = self.store.messages(self.conversation_id, with_images=False)
        return next((m for m in messages if m.id == message_id), None)

    def _sampling(self) -> SamplingSettings:
        """The open conversation's settings over the app's defaults."""
        assert self.conversation_id is not None
        stored = self.store.conversation(self.conversation_id).settings
        return SamplingSettings.from_dict({**self._settings.to_dict(), **stored})

    def _on_system_prompt(self, text: str) -> None:
        if self.conversation_id is None:
            return
        if text.strip() != self.store.conversation(self.conversation_id).system_prompt:
            self.store.set_system_prompt(self.conversation_id, text.strip())
            self._open(self.conversation_id, redraw=False)  # the model hears the new prompt

    def _on_sampling(self, sampling: dict) -> None:
        if self.conversation_id is None:
            return
        self.store.set_settings(self.conversation_id, sampling)
        if self._reply_request is None:  # else it applies when the reply ends
            self._apply_context_length()

    def _apply_context_length(self) -> None:
        if self.model_ready and self._n_ctx() != self._loaded_n_ctx:
            assert self.conversation_id is not None
            self._open(self.conversation_id, redraw=False)

    def _on_item_renamed(self, item: QListWidgetItem) -> None:
        title = " ".join(item.text().split())
        conversation_id = int(item.data(CONVERSATION_ID))
        if title and title != self.store.conversation(conversation_id).title:
            self.store.rename(conversation_id, title)

    def _open(self, conversation_id: int, redraw: bool = True) -> None:
        """Show a conversation and give the model its history; `redraw=False` when only the
        model or its settings changed (the messages shown are the same: drawing a long
        conversation again would cost the GUI thread for nothing)."""
        self.conversation_id = conversation_id
        conversation = self.store.conversation(conversation_id)
        self.window.settings.show_settings(
            conversation.system_prompt, self._sampling(), self._n_ctx()
        )
        self.window.settings.show_thinking(self._thinking_switch, self._thinking() is not False)
        if redraw or self._shown_conversation != conversation_id:
            self._show_conversation()
        if not self.model_ready:
            return
        if self._n_ctx() != self._loaded_n_ctx:
            self._reload_for_context(self._n_ctx())  # reopens this conversation when loaded
            return
        self.worker.start_conversation(None, self.store.history(conversation_id))

    def _thinking(self) -> bool | None:
        """The conversation's Think choice where the model has the switch, else None."""
        assert self.conversation_id is not None
        stored = self.store.conversation(self.conversation_id).settings.get(THINKING_KEY)
        return stored if self._thinking_switch and isinstance(stored, bool) else None

    def _n_ctx(self) -> int:
        """The open conversation's context length: its own setting, else the app's."""
        assert self.conversation_id is not None
        stored = self.store.conversation(self.conversation_id).settings.get(N_CTX_KEY)
        return stored if isinstance(stored, int) and stored > 0 else self._default_n_ctx

    def _reload_for_context(self, n_ctx: int) -> None:
        """A context length is a load-time parameter: re-plan (the KV cache moves) and reload."""
        self.window.statusBar().showMessage(f"reloading the model with {n_ctx} tokens of context")
        self._load(
            LoadRequest(self._model_path, n_ctx, self._profile, self._budget(), self._mmproj)
        )

    def _load(self, load: LoadRequest | PlannedLoad) -> None:
        """Queue the load; until ModelLoaded the input waits (the old model is freed first)."""
        self.stop()
        self._previous = None
        if self.model_ready:
            label = self.window.model_label.text()
            self._previous = (self._model_path, self._loaded_n_ctx, self._plan, label)
        self._model_path, self._loaded_n_ctx = _path_and_context(load)
        self._mmproj = load.mmproj_path
        self._profile = load.profile
        self.model_ready = False
        self.vision = None
        self.window.model_label.setText("loading model…")
        self.window.plan_label.setText("planning…" if load.profile else plan_in_words(None))
        self.window.input.setEnabled(False)
        if isinstance(load, PlannedLoad):
            self._load_request = self.worker.load_model(load.params, load.plan, load.profile)
        else:
            self._load_request = self.worker.load_planned(load)

    def _budget(self) -> int | None:
        return self._plan.vram.budget_bytes if self._plan else None

    def _show_conversation(self) -> None:
        """The open conversation, read without its images (they are read when drawn)."""
        if self.conversation_id is None:
            return
        rows = [
            MessageRow(m.id, m.role, m.content, m.thinking, m.image_names, m.stats)
            for m in self.store.messages(self.conversation_id, with_images=False)
            if m.content or m.thinking or m.complete
        ]
        self.window.chat_view.show_messages(rows)
        self._shown_conversation = self.conversation_id
        self._context_used = _context_used(rows)
        self.window.show_context(self._context_used, self._loaded_n_ctx if self.model_ready else 0)
        self._show_empty_state()

    def _show_empty_state(self) -> None:
        view = self.window.chat_view
        if self.model_ready or self._load_request is not None and not self._load_failed:
            view.set_empty_state(EMPTY_CHAT_TITLE, EMPTY_CHAT_LINES)
        else:
            view.set_empty_state(NO_MODEL_TITLE, NO_MODEL_LINES)

    def _refresh_list(self) -> None:
        text = self.window.search.text().strip()
        found = self.store.search(text) if text else self.store.conversations()
        items = [(c.id, c.title) for c in found]
        self.window.show_conversations(items, self.conversation_id)

    def _retitle(self, first_message: str) -> None:
        assert self.conversation_id is not None
        if self.store.conversation(self.conversation_id).title == NEW_TITLE:
            title = " ".join(first_message.split())[:TITLE_CHARS] or NEW_TITLE
            self.store.rename(self.conversation_id, title)
            self._refresh_list()

    def _save_reply(self, complete: bool, stats: dict | None = None) -> None:
        if self._reply_message is not None:
            self.store.update_message(
                self._reply_message, self._reply_text, complete, stats, self._reply_thinking
            )
            self._saved_at = time.monotonic()

    def _end_reply(self) -> None:
        """The reply is over: its row shows what was saved (the kept text, stats)."""
        if self._reply_message is not None:
            stats = self._reply_stats
            self.window.chat_view.finish_streaming(
                MessageRow(
                    self._reply_message, "assistant", self._reply_text, self._reply_thinking,
                    stats=stats,
                )
            )  # fmt: skip
        self._reply_request = self._reply_message = None
        self._reply_stats = None
        self.window.set_busy(False)


def _path_and_context(load: LoadRequest | PlannedLoad) -> tuple[str, int]:
    if isinstance(load, PlannedLoad):
        return str(load.params.model_path), load.params.n_ctx
    return load.model_path, load.n_ctx


def safe_file_name(title: str) -> str:
    """A conversation title as a file name on every system (no separators or reserved signs)."""
    kept = "".join(c if c.isalnum() or c in " -_." else " " for c in title)
    return " ".join(kept.split())[:80].strip(" .") or "chat"


def no_vision_message(model_name: str) -> str:
    """Why images cannot be sent, and how to fix it."""
    return (
        f"{model_name or 'this model'} cannot see images: it has no vision projector. Pair "
        "the projector (mmproj GGUF) made for it in Tools → Models (Ctrl+M), or remove the "
        "images to send the text"
    )


def _context_used(rows: Sequence[MessageRow]) -> int:
    """What the conversation's last reply filled of the context (its prompt and itself), as
    the meter said then: a restored conversation shows it before the next reply."""
    for row in reversed(rows):
        stats = row.stats if row.role == "assistant" else None
        if stats:
            prompt, reply = stats.get("prompt_tokens"), stats.get("generated_tokens")
            return prompt + reply if isinstance(prompt, int) and isinstance(reply, int) else 0
    return 0
