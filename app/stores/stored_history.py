"""A conversation's history to be read where the engine runs, not on the GUI thread.

Opening a long chat gives the model its history. Read on the GUI thread, the first
read of a long conversation (SQLite's pages cold) stalled the window for tens of ms;
as a value naming what to read, it travels with the engine's request (to a child
engine too: it pickles) and is read by the engine's thread, in order with the
messages that follow it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.stores.chat_store import ChatStore
from engine.model.chat_message import ChatMessage


@dataclass(frozen=True)
class StoredHistory:
    store_path: Path
    conversation_id: int
    max_chars: int | None  # as ChatStore.history: the newest messages, up to this much text
    through: int | None  # the newest position when it was asked for: what came later is not
    # history yet (a message sent meanwhile is asked on its own)
    leave_out_last: bool = False  # a message held for the model is asked on its own

    def read(self) -> tuple[ChatMessage, ...]:
        with ChatStore(self.store_path) as store:
            history = store.history(self.conversation_id, self.max_chars, self.through)
        return tuple(history[:-1] if self.leave_out_last else history)
