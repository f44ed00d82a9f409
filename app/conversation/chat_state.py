"""The open conversation and the reply being streamed into it, saved as they happen.

The chat store is the one record of what was said: a message is saved as it is
sent, a streamed reply is saved incomplete and refreshed every
SAVE_INTERVAL_S, so a killed app loses at most the reply being generated. The
rows shown are read from the store; the model is given the store's history
whenever what it must remember changes (another conversation, an edit, a
deletion, a new system prompt).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from app.conversation.message_row import MessageRow
from app.conversation.model_status import ModelStatus
from app.engine_host.events import ReplyFinished
from app.stores.chat_records import StoredMessage
from app.stores.chat_store import ChatStore
from app.stores.stored_history import StoredHistory
from engine.generation.sampling import SamplingSettings
from engine.model.image_input import ImageFile

SAVE_INTERVAL_S = 0.5
N_CTX_KEY = "n_ctx"  # a conversation's context length, kept with its sampling settings
THINKING_KEY = "thinking"  # a conversation's Think choice, kept with its sampling settings
NEW_TITLE = "New chat"
TITLE_CHARS = 40
WAIT_FOR_MODEL = "wait for the model to load"
PAGE_MESSAGES = 100  # messages a chat opens with, and each scroll to its top reads more
# A token is rarely over 16 characters (a run of spaces in code); twice that is a bound
# no tokenizer passes in practice, so the history read back is all a window could hold.
CHARS_PER_TOKEN_AT_MOST = 32
WAIT_FOR_REPLY = "wait for the current reply (Esc stops it)"


@dataclass
class Reply:
    """The reply being streamed: its request, its saved row, and what it said so far."""

    request_id: int | None  # None: not asked yet (held while the model loads)
    message_id: int
    asked: str  # the message it answers
    text: str = ""
    thinking: str = ""  # a reasoning model's thinking, apart from the answer
    stats: dict | None = None
    saved_at: float = 0.0

    def row(self, streaming: bool = False) -> MessageRow:
        return MessageRow(
            self.message_id, "assistant", self.text, self.thinking, stats=self.stats,
            streaming=streaming,
        )  # fmt: skip


@dataclass(frozen=True)
class Turn:
    """A message sent: its row, the empty reply's row, and whether it titled the conversation."""

    asked: MessageRow
    reply: MessageRow
    retitled: bool


class ChatState:
    """What the chat window shows and may do; the controller renders it and feeds it events."""

    def __init__(
        self,
        store: ChatStore,
        defaults: SamplingSettings,
        model: ModelStatus,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.defaults, self.model = store, defaults, model
        self.default_n_ctx = model.n_ctx  # a conversation without its own context length
        self.conversation_id: int | None = None
        self.reply: Reply | None = None
        self.shown_conversation: int | None = None  # the conversation the view shows
        self.context_used = 0  # tokens the shown conversation's last reply filled
        self.more_above = False  # the shown conversation has older messages not read yet
        self._first_position: int | None = None  # the position of the oldest one read
        self._clock = clock

    # --- which conversation ---

    def open_first(self, conversation_id: int | None = None) -> int:
        """Recover what a crash left; open this conversation, else the newest, else a new one."""
        self.store.discard_incomplete()
        conversations = self.store.conversations()
        if conversation_id in {c.id for c in conversations}:
            self.conversation_id = conversation_id
        elif conversations:
            self.conversation_id = conversations[0].id
        else:
            self.conversation_id = self.store.create_conversation(NEW_TITLE).conversation_id
        return self.conversation_id

    def new_conversation(self) -> int:
        self.conversation_id = self.store.create_conversation(NEW_TITLE).conversation_id
        return self.conversation_id

    def delete_open(self) -> int | None:
        """Delete the open conversation; the newest other one opens (None: none is left)."""
        if self.conversation_id is None or self.reply is not None:
            return self.conversation_id
        self.store.delete(self.conversation_id)
        remaining = self.store.conversations()
        self.conversation_id = remaining[0].id if remaining else None
        return self.conversation_id

    def listed(self, search: str) -> list[tuple[int, str]]:
        """The conversations the list shows (id, title), newest first, matching `search`."""
        text = search.strip()
        found = self.store.search(text) if text else self.store.conversations()
        return [(c.id, c.title) for c in found]

    def rename(self, conversation_id: int, title: str) -> bool:
        title = " ".join(title.split())
        if not title or title == self.store.conversation(conversation_id).title:
            return False
        self.store.rename(conversation_id, title)
        return True

    def title(self) -> str:
        return self.store.conversation(self._open_id()).title

    def rows(self) -> list[MessageRow]:
        """The open conversation's newest page as shown, read without its images (they are
        read when drawn); what was shown, how full its context was and whether older
        messages are left to read (`more_above`) are remembered."""
        if self.conversation_id is None:
            return []
        rows = self._page(None)
        self.shown_conversation = self.conversation_id
        self.context_used = context_used(rows)
        return rows

    def older_rows(self) -> list[MessageRow]:
        """The page before what is shown (the view was scrolled up to its top)."""
        if self.conversation_id is None or not self.more_above:
            return []
        return self._page(self._first_position)

    def _page(self, before_position: int | None) -> list[MessageRow]:
        assert self.conversation_id is not None
        # one more than a page: whether there are older ones is known without another read
        page = self.store.messages_before(self.conversation_id, PAGE_MESSAGES + 1, before_position)
        self.more_above = len(page) > PAGE_MESSAGES
        page = page[-PAGE_MESSAGES:]
        if page:
            self._first_position = page[0].position
        return [
            MessageRow(m.id, m.role, m.content, m.thinking, m.image_names, m.stats)
            for m in page
            if m.content or m.thinking or m.complete
        ]

    def stored_history(self, leave_out_last: bool = False) -> StoredHistory:
        """What the model must remember of the open conversation, to be read on the engine's
        thread: the newest messages, as many as its context window could hold (a window of
        n tokens holds no more than CHARS_PER_TOKEN_AT_MOST * n characters). Opening,
        editing or deleting in a long chat then costs the window nothing of the history."""
        conversation_id, max_chars = self._open_id(), CHARS_PER_TOKEN_AT_MOST * self.n_ctx()
        last = self.store.last_position(conversation_id)
        through = last if last is not None else -1  # an empty chat's history stays empty
        return StoredHistory(self.store.path, conversation_id, max_chars, through, leave_out_last)

    # --- the open conversation's settings ---

    def system_prompt(self) -> str:
        return self.store.conversation(self._open_id()).system_prompt

    def sampling(self) -> SamplingSettings:
        """The open conversation's settings over the app's defaults."""
        stored = self.store.conversation(self._open_id()).settings
        return SamplingSettings.from_dict({**self.defaults.to_dict(), **stored})

    def thinking(self) -> bool | None:
        """The conversation's Think choice where the model has the switch, else None."""
        stored = self.store.conversation(self._open_id()).settings.get(THINKING_KEY)
        return stored if self.model.thinking_switch and isinstance(stored, bool) else None

    def n_ctx(self) -> int:
        """The open conversation's context length: its own setting, else the app's."""
        stored = self.store.conversation(self._open_id()).settings.get(N_CTX_KEY)
        return stored if isinstance(stored, int) and stored > 0 else self.default_n_ctx

    def needs_reload(self) -> bool:
        """The model is loaded with another context length than the open conversation's."""
        return self.model.ready and self.n_ctx() != self.model.n_ctx

    def set_system_prompt(self, text: str) -> bool:
        """True when the prompt changed (the model must hear it)."""
        if self.conversation_id is None or text.strip() == self.system_prompt():
            return False
        self.store.set_system_prompt(self.conversation_id, text.strip())
        return True

    def set_sampling(self, sampling: dict) -> bool:
        if self.conversation_id is None:
            return False
        self.store.set_settings(self.conversation_id, sampling)
        return True

    # --- what the input may do ---

    def cannot_send(self, with_images: bool = False) -> str:
        """Why a message cannot go now ("" when it can)."""
        if not self.model.ready:
            return WAIT_FOR_MODEL
        if self.reply is not None:
            return WAIT_FOR_REPLY
        if with_images and self.model.vision is None:
            return no_vision_message(self.model.name)
        return ""

    def can_change_messages(self) -> bool:
        """Edit and delete wait for the reply; edit also for the model (it re-reads history)."""
        return self.reply is None and self.model.ready

    # --- the reply ---

    def ask(self, text: str, images: Sequence[ImageFile] = ()) -> Turn:
        """Save the message and an empty reply to stream into; the first message titles a
        new conversation. The caller sets the reply's request id once the worker has it."""
        conversation_id = self._open_id()
        asked = self.store.add_message(conversation_id, "user", text, images=images)
        retitled = self._retitle(text)
        change = self.store.add_message(conversation_id, "assistant", "", complete=False)
        assert change.message_id is not None and asked.message_id is not None
        self.reply = Reply(None, change.message_id, text)
        names = tuple(image.name for image in images)
        row = MessageRow(asked.message_id, "user", text, image_names=names)
        return Turn(row, self.reply.row(streaming=True), retitled)

    @property
    def held(self) -> Reply | None:
        """The reply to a message sent while the model loaded, not asked of it yet."""
        reply = self.reply
        return reply if reply is not None and reply.request_id is None else None

    def streamed(self, request_id: int, text: str = "", thinking: str = "") -> Reply | None:
        """A piece of the reply (None when it is another request's); saved now and then."""
        reply = self.reply
        if reply is None or request_id != reply.request_id:
            return None
        reply.text += text
        reply.thinking += thinking
        if self._clock() - reply.saved_at > SAVE_INTERVAL_S:
            self._save(reply, complete=False)
        return reply

    def finished(self, event: ReplyFinished) -> MessageRow | None:
        """The reply ended: saved complete with its stats; the row to show (None: not ours)."""
        reply = self.reply
        if reply is None or event.request_id != reply.request_id:
            return None
        reply.text, reply.thinking = event.text, event.thinking
        reply.stats = event.stats.to_dict()
        self.context_used = event.context_used
        return self._end(reply)

    def failed(self, request_id: int | None) -> MessageRow | None:
        """The reply's request failed (None: a reply held for the model, never asked): what
        it said so far stays, complete."""
        reply = self.reply
        if reply is None or request_id != reply.request_id:
            return None
        return self._end(reply)

    def close(self) -> None:
        """The app is closing: keep what the reply said so far."""
        if self.reply is not None:
            self._end(self.reply)

    def _end(self, reply: Reply) -> MessageRow:
        self._save(reply, complete=True)
        self.reply = None
        return reply.row()

    def _save(self, reply: Reply, complete: bool) -> None:
        text, stats, thinking = reply.text, reply.stats, reply.thinking
        self.store.update_message(reply.message_id, text, complete, stats, thinking)
        reply.saved_at = self._clock()

    def _retitle(self, first_message: str) -> bool:
        if self.title() != NEW_TITLE:
            return False
        title = " ".join(first_message.split())[:TITLE_CHARS] or NEW_TITLE
        self.store.rename(self._open_id(), title)
        return True

    # --- taking messages back, editing and deleting them ---

    def last_user_message(self) -> StoredMessage | None:
        """The last message sent, with its images (to send again or put back in the input)."""
        if self.conversation_id is None:
            return None
        messages = self.store.messages(self.conversation_id, with_images=False)
        last = next((m for m in reversed(messages) if m.role == "user"), None)
        return self._with_images(last) if last is not None else None

    def stored(self, message_id: int) -> StoredMessage | None:
        """A message of the open conversation, with its images."""
        messages = self.store.messages(self._open_id(), with_images=False)
        found = next((m for m in messages if m.id == message_id), None)
        return self._with_images(found) if found is not None else None

    def take_back(self, message: StoredMessage) -> None:
        """Remove a user message and what followed it (the model must forget them too)."""
        self.store.truncate_after(self._open_id(), message.position - 1)

    def edit_reply(self, message_id: int, text: str) -> MessageRow:
        """A reply corrected by hand: the model sees it as its reply from now on."""
        self.store.update_message(message_id, text, complete=True)
        return MessageRow(message_id, "assistant", text)

    def delete_message(self, message_id: int) -> None:
        self.store.delete_message(message_id)

    def _with_images(self, message: StoredMessage) -> StoredMessage:
        """The message with its images read (only this message's, not the conversation's)."""
        images = tuple(self.store.image(message.id, i) for i in range(len(message.image_names)))
        return replace(message, images=images)

    def _open_id(self) -> int:
        assert self.conversation_id is not None, "no conversation is open"
        return self.conversation_id


def no_vision_message(model_name: str) -> str:
    """Why images cannot be sent, and how to fix it."""
    return (
        f"{model_name or 'this model'} cannot see images: it has no vision projector. Pair "
        "the projector (mmproj GGUF) made for it in Tools → Models (Ctrl+M), or remove the "
        "images to send the text"
    )


def context_used(rows: Sequence[MessageRow]) -> int:
    """What the conversation's last reply filled of the context (its prompt and itself), as
    the meter said then: a restored conversation shows it before the next reply."""
    for row in reversed(rows):
        stats = row.stats if row.role == "assistant" else None
        if stats:
            prompt, reply = stats.get("prompt_tokens"), stats.get("generated_tokens")
            return prompt + reply if isinstance(prompt, int) and isinstance(reply, int) else 0
    return 0
