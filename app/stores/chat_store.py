"""The chat history: conversations and their messages, saved as they happen.

Why save every step: the app may be killed at any moment (a crash, a power
cut, the user ending the process). Each call here is one short SQLite
transaction, so what was written is on disk when the call returns, and a
killed app loses at most the reply being generated. A streamed reply is
stored as an *incomplete* assistant message when it starts and updated as it
streams; `discard_incomplete()` at start-up drops the empty ones and keeps
the partial text of the others, marked complete.

Why WAL: see app.stores.chat_schema, which makes the file (opened as every store's is, by
app.stores.store_base).

Why so careful on open: exactly as `app.stores.profile_store`, a damaged or foreign
`chats.sqlite3` is never written to and never deleted. It is moved aside to
`chats.sqlite3.corrupt-YYYYmmdd-HHMMSS` (with its -wal/-shm/-journal), a
warning is logged, `recovered_from` says where it went, and a fresh store
starts, so the user can still chat and the old bytes can still be rescued.

Every mutating call returns a `Change` naming what changed, so a view can
decide whether it needs to refresh without re-reading everything.

Threads: a `ChatStore` holds one SQLite connection, which must be used only
from the thread that created the store (sqlite3's `check_same_thread`
enforces it). In the app that is the GUI thread; a worker thread that needs
the history opens its own `ChatStore` on the same file (WAL lets readers and
one writer work at once).

Search is case-insensitive substring search over titles and message text. If
this SQLite has FTS5 with the trigram tokenizer, message text is indexed
(`messages_fts`, kept in sync by triggers) and queries of 3 or more
characters use the index; otherwise, and for shorter queries, the messages
are scanned. The index folds case by SQLite's Unicode rules, the scan by
Python's `str.lower`; they agree except on rare folds (e.g. "ß" vs "ss"), and
the index does not see text after a NUL character in a message (FTS5 stops
reading there; a query with a NUL in it is scanned instead).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from app.paths import app_paths
from app.stores.chat_records import (
    Change,
    Conversation,
    StoredMessage,
    check_id,
    check_role,
    check_text,
    check_title,
    conversation_from_row,
    encode_settings,
    encode_stats,
    message_from_row,
    no_conversation,
)
from app.stores.chat_schema import (
    CHAT_SCHEMA,
    CONVERSATION_SELECT,
    MESSAGE_SELECT,
    NEWEST_FIRST,
    STORE_FILE_NAME,
    has_table,
)
from app.stores.store_base import SqliteStore
from engine.errors import BadInputError
from engine.generation.stats import GenerationStats
from engine.model.chat_message import ChatMessage
from engine.model.image_input import ImageFile

log = logging.getLogger(__name__)

HISTORY_PAGE = 256  # messages read at a time for a long conversation's history

FTS_MIN_QUERY_CHARS = 3  # the trigram index cannot match anything shorter

# Change kinds: what a mutating call did, for views deciding whether to refresh.
CONVERSATION_CREATED = "conversation_created"
CONVERSATION_RENAMED = "conversation_renamed"
CONVERSATION_UPDATED = "conversation_updated"  # system prompt or settings
CONVERSATION_DELETED = "conversation_deleted"
MESSAGE_ADDED = "message_added"
MESSAGE_UPDATED = "message_updated"
MESSAGE_DELETED = "message_deleted"
MESSAGES_TRUNCATED = "messages_truncated"


def default_store_path() -> Path:
    """Where the chat history lives: the app's data folder (honours SHARDCHAT_HOME)."""
    return app_paths().data_dir / STORE_FILE_NAME


# -- the store ---------------------------------------------------------------------------------


class ChatStore(SqliteStore):
    """Conversations in one SQLite file; connects in __init__, use as a context manager.

    Use a store only from the thread that created it (see the module docstring).
    """

    schema = CHAT_SCHEMA

    def __init__(self, path: Path | None = None) -> None:
        self._last_stamp: datetime | None = None
        super().__init__(path)
        self._has_fts = has_table(self._conn, "messages_fts")

    # -- conversations -------------------------------------------------------------------------

    def create_conversation(
        self,
        title: str = "New chat",
        system_prompt: str = "",
        settings: Mapping[str, Any] | None = None,
    ) -> Change:
        """Start an empty conversation; it becomes the newest-updated one."""
        clean_title = check_title(title)
        prompt = check_text(system_prompt, "system prompt")
        settings_json = encode_settings(settings or {})
        with self._transaction():
            now = self._stamp()
            cursor = self._conn.execute(
                "INSERT INTO conversations"
                " (title, system_prompt, settings_json, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (clean_title, prompt, settings_json, now, now),
            )
        conversation_id = int(cursor.lastrowid or 0)
        log.debug("created conversation %d", conversation_id)
        return Change(CONVERSATION_CREATED, conversation_id)

    def rename(self, conversation_id: int, title: str) -> Change:
        """Give a conversation a new title (whitespace runs become one space)."""
        clean_title = check_title(title)
        self._update_conversation(conversation_id, "title", clean_title)
        return Change(CONVERSATION_RENAMED, conversation_id)

    def set_system_prompt(self, conversation_id: int, text: str) -> Change:
        """Replace the conversation's system prompt ('' for none)."""
        prompt = check_text(text, "system prompt")
        self._update_conversation(conversation_id, "system_prompt", prompt)
        return Change(CONVERSATION_UPDATED, conversation_id)

    def set_settings(self, conversation_id: int, settings: Mapping[str, Any]) -> Change:
        """Replace the conversation's settings (any JSON object, e.g. sampling parameters)."""
        settings_json = encode_settings(settings)
        self._update_conversation(conversation_id, "settings_json", settings_json)
        return Change(CONVERSATION_UPDATED, conversation_id)

    def delete(self, conversation_id: int) -> Change:
        """Delete a conversation and, by the foreign key's cascade, all its messages."""
        check_id(conversation_id, "conversation")
        with self._transaction():
            cursor = self._conn.execute(
                "DELETE FROM conversations WHERE id = ?", (conversation_id,)
            )
            if cursor.rowcount == 0:
                raise no_conversation(conversation_id)
        log.debug("deleted conversation %d", conversation_id)
        return Change(CONVERSATION_DELETED, conversation_id)

    def conversations(self) -> list[Conversation]:
        """Every conversation, the most recently updated first."""
        rows = self._conn.execute(CONVERSATION_SELECT + NEWEST_FIRST).fetchall()
        return [conversation_from_row(self.path, row) for row in rows]

    def conversation(self, conversation_id: int) -> Conversation:
        """One conversation by id; an unknown id is bad input."""
        check_id(conversation_id, "conversation")
        row = self._conn.execute(
            CONVERSATION_SELECT + " WHERE id = ?", (conversation_id,)
        ).fetchone()
        if row is None:
            raise no_conversation(conversation_id)
        return conversation_from_row(self.path, row)

    # -- messages ------------------------------------------------------------------------------

    def messages(self, conversation_id: int, with_images: bool = True) -> list[StoredMessage]:
        """The conversation's messages in position order, incomplete ones included.

        Without images, each message says only its images' names (`image_names`) and
        `image()` reads one when it is shown: a view of a long conversation with photos
        must not pull every BLOB off the disk to draw the visible few.
        """
        self.conversation(conversation_id)  # refuses an unknown id
        rows = self._conn.execute(
            MESSAGE_SELECT + " WHERE conversation_id = ? ORDER BY position",
            (conversation_id,),
        ).fetchall()
        names, images = self._images_of(conversation_id, with_images)
        return [
            message_from_row(self.path, row, images.get(row[0], ()), names.get(row[0], ()))
            for row in rows
        ]

    def messages_before(
        self, conversation_id: int, limit: int, before_position: int | None = None,
        with_images: bool = False,
    ) -> list[StoredMessage]:  # fmt: skip
        """Up to `limit` messages before position `before_position` (None: the newest), in
        position order: one page of a long conversation, read through the position index,
        so opening one costs a page, not the whole history."""
        self.conversation(conversation_id)  # refuses an unknown id
        rows = self._conn.execute(
            MESSAGE_SELECT + " WHERE conversation_id = ? AND position < ?"
            " ORDER BY position DESC LIMIT ?",
            (conversation_id, before_position if before_position is not None else 2**62, limit),
        ).fetchall()
        rows.reverse()
        names, images = self._images_of(conversation_id, with_images, [row[0] for row in rows])
        return [
            message_from_row(self.path, row, images.get(row[0], ()), names.get(row[0], ()))
            for row in rows
        ]

    def image(self, message_id: int, index: int) -> ImageFile:
        """Image `index` (0-based, in order) of one message, read now."""
        check_id(message_id, "message")
        row = self._conn.execute(
            "SELECT name, data FROM message_images WHERE message_id = ?"
            " ORDER BY position LIMIT 1 OFFSET ?",
            (message_id, index),
        ).fetchone()
        if row is None:
            raise BadInputError(f"message {message_id} has no image {index}")
        return ImageFile(row[0], bytes(row[1]))

    def _images_of(
        self, conversation_id: int, with_data: bool, message_ids: Sequence[int] | None = None
    ) -> tuple[dict[int, tuple[str, ...]], dict[int, tuple[ImageFile, ...]]]:
        """Each message's image names, and (with_data) the images themselves; of the
        messages `message_ids` only, when given (a page)."""
        data_column = "i.data" if with_data else "NULL"
        if message_ids is not None:
            if not message_ids:
                return {}, {}
            rows = self._conn.execute(
                f"SELECT i.message_id, i.name, {data_column} FROM message_images i"
                " WHERE i.message_id BETWEEN ? AND ? ORDER BY i.message_id, i.position",
                (min(message_ids), max(message_ids)),
            ).fetchall()
            wanted = set(message_ids)
            rows = [row for row in rows if row[0] in wanted]
        else:
            rows = self._conn.execute(
                f"SELECT i.message_id, i.name, {data_column} FROM message_images i"
                " JOIN messages m ON m.id = i.message_id"
                " WHERE m.conversation_id = ? ORDER BY i.message_id, i.position",
                (conversation_id,),
            ).fetchall()
        names: dict[int, tuple[str, ...]] = {}
        images: dict[int, tuple[ImageFile, ...]] = {}
        for message_id, name, data in rows:
            names[message_id] = (*names.get(message_id, ()), name)
            if with_data:
                images[message_id] = (*images.get(message_id, ()), ImageFile(name, bytes(data)))
        return names, images

    def add_message(
        self,
        conversation_id: int,
        role: str,
        content: str,
        complete: bool = True,
        stats: GenerationStats | Mapping[str, Any] | None = None,
        images: Sequence[ImageFile] = (),
    ) -> Change:
        """Append a message after the conversation's last one; only replies may be incomplete.

        A user message may carry images; they are saved with it, in the same transaction.
        """
        if images and role != "user":
            raise BadInputError("only user messages carry images")
        check_id(conversation_id, "conversation")
        check_role(role, complete)
        text = check_text(content, "message content")
        stats_json = encode_stats(stats)
        with self._transaction():
            self._require_conversation(conversation_id)
            now = self._stamp()
            cursor = self._conn.execute(
                "INSERT INTO messages"
                " (conversation_id, position, role, content, stats_json, complete, created_at)"
                " SELECT ?, COALESCE(MAX(position), -1) + 1, ?, ?, ?, ?, ?"
                " FROM messages WHERE conversation_id = ?",
                (conversation_id, role, text, stats_json, int(complete), now, conversation_id),
            )
            message_id = int(cursor.lastrowid or 0)
            self._conn.executemany(
                "INSERT INTO message_images (message_id, position, name, data) VALUES (?, ?, ?, ?)",
                [(message_id, i, image.name, image.data) for i, image in enumerate(images)],
            )
            self._touch(conversation_id, now)
        return Change(MESSAGE_ADDED, conversation_id, message_id)

    def update_message(
        self,
        message_id: int,
        content: str,
        complete: bool,
        stats: GenerationStats | Mapping[str, Any] | None = None,
        thinking: str = "",
    ) -> Change:
        """Replace a message's text, completeness and stats: how a streamed reply is saved.

        Stats are replaced too (None clears them): statistics describe the text
        they came with, so they must not outlive an edit. So is a reasoning model's
        `thinking`, kept for showing again but left out of `history`.
        """
        check_id(message_id, "message")
        text = check_text(content, "message content")
        stats_json = encode_stats(stats)
        with self._transaction():
            row = self._conn.execute(
                "SELECT conversation_id, role FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            if row is None:
                raise BadInputError(f"no message with id {message_id}")
            conversation_id, role = row
            check_role(role, complete)
            self._conn.execute(
                "UPDATE messages SET content = ?, complete = ?, stats_json = ?, thinking = ?"
                " WHERE id = ?",
                (text, int(complete), stats_json, thinking or None, message_id),
            )
            self._touch(conversation_id, self._stamp())
        return Change(MESSAGE_UPDATED, conversation_id, message_id)

    def delete_message(self, message_id: int) -> Change:
        """Delete one message (its images go with it): the message menu's Delete."""
        check_id(message_id, "message")
        with self._transaction():
            row = self._conn.execute(
                "SELECT conversation_id FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            if row is None:
                raise BadInputError(f"no message with id {message_id}")
            self._conn.execute("DELETE FROM messages WHERE id = ?", (message_id,))
            self._touch(row[0], self._stamp())
        return Change(MESSAGE_DELETED, row[0], message_id)

    def truncate_after(self, conversation_id: int, position: int) -> Change:
        """Delete the messages after `position` (-1 deletes all): for Regenerate and Edit."""
        check_id(conversation_id, "conversation")
        if not isinstance(position, int) or isinstance(position, bool) or position < -1:
            raise BadInputError(f"a position must be a whole number >= -1, not {position!r}")
        with self._transaction():
            self._require_conversation(conversation_id)
            cursor = self._conn.execute(
                "DELETE FROM messages WHERE conversation_id = ? AND position > ?",
                (conversation_id, position),
            )
            self._touch(conversation_id, self._stamp())
        log.debug(
            "removed %d messages after %d from conversation %d",
            cursor.rowcount,
            position,
            conversation_id,
        )
        return Change(MESSAGES_TRUNCATED, conversation_id)

    def last_position(self, conversation_id: int) -> int | None:
        """The newest message's position (None: no message yet), through the index."""
        row = self._conn.execute(
            "SELECT max(position) FROM messages WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()
        return row[0] if row is not None else None

    def history(
        self, conversation_id: int, max_chars: int | None = None, through: int | None = None
    ) -> list[ChatMessage]:
        """What to send the model: the system prompt, then the messages worth keeping.

        Complete messages, plus an incomplete reply only if it has text (a reply
        cut short still says what the model said; an empty one says nothing).
        `max_chars`: only the newest messages up to that much text (a context window
        holds no more): a long conversation is read back a page at a time until then.
        `through`: only messages up to that position (what the conversation held when the
        history was asked for, if it is read later).
        """
        prompt = self.conversation(conversation_id).system_prompt
        if max_chars is None:
            messages = self.messages(conversation_id)
            messages = [m for m in messages if through is None or m.position <= through]
        else:
            messages = self._newest(conversation_id, max_chars, through)
        turns = [ChatMessage("system", prompt)] if prompt else []
        for message in messages:
            if message.complete or (message.role == "assistant" and message.content):
                turns.append(ChatMessage(message.role, message.content, message.images))
        return turns

    def _newest(
        self, conversation_id: int, max_chars: int, through: int | None
    ) -> list[StoredMessage]:
        """The newest messages (up to position `through`) whose text, together, reaches
        `max_chars` (all if fewer)."""
        pages: list[list[StoredMessage]] = []
        chars, before = 0, (through + 1 if through is not None else None)
        while chars < max_chars:
            page = self.messages_before(conversation_id, HISTORY_PAGE, before, with_images=True)
            if not page:
                break
            pages.append(page)
            chars += sum(len(m.content) + len(m.thinking) for m in page)
            before = page[0].position
        return [message for page in reversed(pages) for message in page]

    def discard_incomplete(self) -> int:
        """Tidy what a killed app left; returns how many empty incomplete messages were removed.

        Call at start-up, before any reply streams: an incomplete message with
        no text is deleted, one with text is kept and marked complete, so the
        kill loses only the part of the reply not yet saved.
        """
        with self._transaction():
            removed = self._conn.execute(
                "DELETE FROM messages WHERE complete = 0 AND content = ''"
            ).rowcount
            kept = self._conn.execute(
                "UPDATE messages SET complete = 1 WHERE complete = 0"
            ).rowcount
        if removed or kept:
            log.info("unfinished replies: removed %d empty, kept %d partial", removed, kept)
        return removed

    # -- search --------------------------------------------------------------------------------

    def search(self, text: str) -> list[Conversation]:
        """Conversations whose title or any message contains `text`, ignoring case; newest first.

        Leading and trailing whitespace is ignored; a blank query finds every
        conversation (as a cleared search box should).
        """
        if not isinstance(text, str):
            raise BadInputError(f"a search must be text, not {type(text).__name__}")
        query = text.strip()
        if not query:
            return self.conversations()
        everything = self.conversations()
        with_text = self._conversations_with_text(query)
        folded = query.lower()
        return [c for c in everything if c.id in with_text or folded in c.title.lower()]

    def _conversations_with_text(self, query: str) -> set[int]:
        """Ids of conversations with a message containing `query`, by the index if it can."""
        if self._has_fts and len(query) >= FTS_MIN_QUERY_CHARS and "\x00" not in query:
            phrase = '"' + query.replace('"', '""') + '"'
            rows = self._conn.execute(
                "SELECT DISTINCT conversation_id FROM messages WHERE id IN"
                " (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?)",
                (phrase,),
            )
            return {row[0] for row in rows}
        folded = query.lower()
        found: set[int] = set()
        for conversation_id, content in self._conn.execute(
            "SELECT conversation_id, content FROM messages"
        ):
            if conversation_id not in found and folded in content.lower():
                found.add(conversation_id)
        return found

    # -- internals -----------------------------------------------------------------------------

    def _update_conversation(self, conversation_id: int, column: str, value: str) -> None:
        """Set one column (a name from this module, never from input) and bump updated_at."""
        check_id(conversation_id, "conversation")
        with self._transaction():
            cursor = self._conn.execute(
                f"UPDATE conversations SET {column} = ?, updated_at = ? WHERE id = ?",
                (value, self._stamp(), conversation_id),
            )
            if cursor.rowcount == 0:
                raise no_conversation(conversation_id)

    def _require_conversation(self, conversation_id: int) -> None:
        row = self._conn.execute(
            "SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        if row is None:
            raise no_conversation(conversation_id)

    def _touch(self, conversation_id: int, stamp: str) -> None:
        self._conn.execute(
            "UPDATE conversations SET updated_at = ? WHERE id = ?", (stamp, conversation_id)
        )

    def _stamp(self) -> str:
        """Now in UTC, strictly later than this store's previous stamp.

        Why strictly: "newest-updated first" must follow the order of the
        user's actions even when the clock is coarse (Windows) or two calls
        land in the same microsecond.
        """
        now = datetime.now(timezone.utc)
        if self._last_stamp is not None and now <= self._last_stamp:
            now = self._last_stamp + timedelta(microseconds=1)
        self._last_stamp = now
        return now.isoformat(timespec="microseconds")
