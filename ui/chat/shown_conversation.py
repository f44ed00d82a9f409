"""The conversation the window shows: its messages, its side-panel settings, and what the
model is given of it.

Opening a conversation draws it from ChatState's first page (older pages are
read as the view scrolls up) and hands its history to the worker, which reads
it on the engine's thread; a context length it needs that the loaded model
lacks asks for a reload instead. Drawing is skipped when only the model or the
settings changed, since redrawing a long conversation costs the GUI thread.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt

from app.conversation.chat_state import ChatState
from app.engine_host.engine_client import EngineClient
from engine.model.image_input import ImageFile
from ui.conversation.image_viewer import ImageViewer
from ui.window.main_window import MainWindow

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


class ShownConversation:
    def __init__(
        self,
        window: MainWindow,
        worker: EngineClient,
        state: ChatState,
        reload_for_context: Callable[[int], None],
    ) -> None:
        """`reload_for_context`: loads the model again with the context length given, which
        the conversation's settings ask for and the loaded model lacks."""
        self.window, self.worker, self.state = window, worker, state
        self.model = state.model
        self._reload_for_context = reload_for_context
        w = window
        w.settings.system_prompt_changed.connect(self._on_system_prompt)
        w.settings.sampling_changed.connect(self._on_sampling)
        w.chat_view.image_opened.connect(self.show_image)
        w.chat_view.older_wanted.connect(self.show_older)

    def open(self, redraw: bool = True) -> None:
        """Show the open conversation and give the model its history; `redraw=False` when only
        the model or its settings changed (the messages shown are the same: drawing a long
        conversation again would cost the GUI thread for nothing)."""
        state = self.state
        self.window.settings.show_settings(state.system_prompt(), state.sampling(), state.n_ctx())
        self.window.settings.show_thinking(
            self.model.thinking_switch, state.thinking() is not False
        )
        if redraw or state.shown_conversation != state.conversation_id:
            self.show_conversation()
        if not self.model.ready:
            return
        if state.needs_reload():
            self._reload_for_context(state.n_ctx())  # reopens this conversation when loaded
            return
        # read on the engine's thread; a held message is asked once it has the rest
        self.worker.start_conversation(None, state.stored_history(state.held is not None))

    def apply_context_length(self) -> None:
        """A context length chosen during a reply waits for it to end, then reloads."""
        if self.state.needs_reload():
            self.open(redraw=False)

    def show_conversation(self) -> None:
        if self.state.conversation_id is None:
            return
        rows = self.state.rows()
        self.window.chat_view.show_messages(rows, more_above=self.state.more_above)
        window_size = self.model.n_ctx if self.model.ready else 0
        self.window.show_context(self.state.context_used, window_size)
        self.show_empty_state()

    def show_older(self) -> None:
        """The view reached the top of what was read: the page before it (a few ms)."""
        if self.state.shown_conversation != self.state.conversation_id:
            return
        rows = self.state.older_rows()
        self.window.chat_view.prepend_messages(rows, more_above=self.state.more_above)

    def show_empty_state(self) -> None:
        """An empty chat says how to start: with a model coming, what to ask; without one,
        where to find one."""
        if self.model.coming():
            self.window.chat_view.set_empty_state(EMPTY_CHAT_TITLE, EMPTY_CHAT_LINES)
        else:
            self.window.chat_view.set_empty_state(NO_MODEL_TITLE, NO_MODEL_LINES)

    def show_image(self, image: ImageFile) -> ImageViewer:
        """A thumbnail in the conversation was clicked: the image, whole, beside the chat."""
        viewer = ImageViewer(image, parent=self.window)
        viewer.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        viewer.open()
        return viewer

    def _on_system_prompt(self, text: str) -> None:
        if self.state.set_system_prompt(text):
            self.open(redraw=False)  # the model hears the new prompt

    def _on_sampling(self, sampling: dict) -> None:
        if self.state.set_sampling(sampling) and self.state.reply is None:
            self.apply_context_length()  # during a reply: when it ends
