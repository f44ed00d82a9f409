"""What the input sends and how the reply comes back: send, hold, stream, stop, finish.

A message goes to the engine only through the worker's queue, and the reply
arrives as the bridge's queued signals, so the GUI thread never waits on the
model. A message sent while the model is still loading is held: saved and
shown now, asked once the model has loaded (ui.chat.chat_controller asks it then).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.conversation.chat_state import WAIT_FOR_MODEL, WAIT_FOR_REPLY, ChatState
from app.conversation.message_row import MessageRow
from app.engine_host.engine_client import EngineClient
from app.engine_host.events import ReplyFinished, RequestFailed
from app.screen_text.plan_words import speed_against_plan
from engine.model.image_input import ImageFile
from ui.window.main_window import MainWindow

SENT_WHEN_LOADED = "the model is loading: your message goes to it as soon as it has loaded"


class ChatSending:
    def __init__(
        self,
        window: MainWindow,
        worker: EngineClient,
        state: ChatState,
        retitled: Callable[[], None],
    ) -> None:
        """`retitled`: a first message named its conversation, so the list must show it."""
        self.window, self.worker, self.state = window, worker, state
        self.model = state.model
        self._retitled = retitled

    def submit(self, text: str) -> None:
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
            self._retitled()
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
            self._retitled()
        self.window.chat_view.add_message(turn.asked)
        self.window.chat_view.add_message(turn.reply)
        self.window.set_busy(True)
        self.window.statusBar().showMessage(SENT_WHEN_LOADED, 8000)

    def ask_held(self) -> None:
        """The model has loaded (and been given the conversation before the held message)."""
        held = self.state.held
        assert held is not None
        held.request_id = self.worker.send_message(
            held.asked, self.state.sampling(), thinking=self.state.thinking()
        )

    def stop(self) -> None:
        reply = self.state.reply
        if self.state.held is not None:  # never asked: it ends here, empty; the message stays
            row = self.state.failed(None)
            if row is not None:
                self._end_reply(row)
        elif reply is not None and reply.request_id is not None:
            self.worker.cancel(reply.request_id)

    def make_way_for_load(self) -> None:
        """A load frees the old model: a streaming reply stops, but a held message waits
        for the new model."""
        if self.state.held is None:
            self.stop()

    # --- engine events (GUI thread, queued) ---

    def show_token(self, request_id: int, text: str) -> None:
        reply = self.state.streamed(request_id, text=text)
        if reply is not None:
            self.window.chat_view.show_streaming(reply.text, reply.thinking)

    def show_thinking(self, request_id: int, thinking: str) -> None:
        reply = self.state.streamed(request_id, thinking=thinking)
        if reply is not None:
            self.window.chat_view.show_streaming(reply.text, reply.thinking)

    def finish(self, event: ReplyFinished) -> bool:
        """Whether the reply was this chat's: the caller then refreshes what it changed."""
        row = self.state.finished(event)
        if row is None:
            return False
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
        return True

    def fail(self, event: RequestFailed) -> None:
        """Every failed request is said; a reply it ended keeps what was saved of it."""
        row = self.state.failed(event.request_id)
        if row is not None:
            self._end_reply(row)
        self.window.statusBar().showMessage(event.message, 8000)

    def _end_reply(self, row: MessageRow) -> None:
        """The reply is over: its row shows what was saved (the kept text, stats)."""
        self.window.chat_view.finish_streaming(row)
        self.window.set_busy(False)
