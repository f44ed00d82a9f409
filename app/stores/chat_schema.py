"""The chat history's SQLite file: its tables, their migrations, and what opening it needs.

WAL with `synchronous=NORMAL`: a commit is then an append to the WAL file
without an fsync, cheap enough to call every half second while streaming, and
a crash of the app never loses a committed transaction (a power cut may lose
the last few, never corrupt the file). The message text is indexed for search
by an FTS5 trigram index where this SQLite has one (see app.stores.chat_store).
"""

from __future__ import annotations

import logging
import sqlite3

from app.stores.sqlite_file import StoreIdentity
from app.stores.store_base import StoreSchema

log = logging.getLogger(__name__)

STORE_FILE_NAME = "chats.sqlite3"
APPLICATION_ID = 0x53684374  # "ShCt": ShardChat's chat history (profiles use "ShCh")
SCHEMA_VERSION = 3  # PRAGMA user_version after the last migration below
MIGRATIONS_TABLE = "_migrations"

CONVERSATION_COLUMNS = (
    "id",
    "title",
    "system_prompt",
    "settings_json",
    "created_at",
    "updated_at",
)
MESSAGE_COLUMNS = (
    "id",
    "conversation_id",
    "position",
    "role",
    "content",
    "stats_json",
    "complete",
    "created_at",
    "thinking",
)
CONVERSATION_SELECT = f"SELECT {', '.join(CONVERSATION_COLUMNS)} FROM conversations"
MESSAGE_SELECT = f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages"
NEWEST_FIRST = " ORDER BY updated_at DESC, id DESC"
# What a chat history has had since its first migration: one written before m003 lacks
# messages.thinking until it is migrated, and must be upgraded, not moved aside.
FIRST_MESSAGE_COLUMNS = tuple(c for c in MESSAGE_COLUMNS if c != "thinking")
CHAT_STORE_IDENTITY = StoreIdentity(
    "chat history",
    APPLICATION_ID,
    (("conversations", CONVERSATION_COLUMNS), ("messages", FIRST_MESSAGE_COLUMNS)),
    MIGRATIONS_TABLE,
)


# -- schema ------------------------------------------------------------------------------------


def m001_chats(conn: sqlite3.Connection) -> None:
    """Conversations, their messages, the search index if possible, and our marks on the file."""
    conn.execute(
        "CREATE TABLE conversations ("
        " id INTEGER PRIMARY KEY,"
        " title TEXT NOT NULL,"
        " system_prompt TEXT NOT NULL DEFAULT '',"
        " settings_json TEXT NOT NULL DEFAULT '{}',"
        " created_at TEXT NOT NULL,"
        " updated_at TEXT NOT NULL)"
    )
    conn.execute(
        "CREATE TABLE messages ("
        " id INTEGER PRIMARY KEY,"
        " conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,"
        " position INTEGER NOT NULL,"
        " role TEXT NOT NULL CHECK(role IN ('system','user','assistant')),"
        " content TEXT NOT NULL,"
        " stats_json TEXT,"
        " complete INTEGER NOT NULL DEFAULT 1,"
        " created_at TEXT NOT NULL,"
        " UNIQUE(conversation_id, position))"
    )
    conn.execute("CREATE INDEX messages_by_position ON messages (conversation_id, position)")
    _create_search_index(conn)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")


def _create_search_index(conn: sqlite3.Connection) -> None:
    """An FTS5 trigram index of message text, if this SQLite has one; search scans otherwise.

    External content (the text lives once, in `messages`); the triggers keep
    the index in step with every insert, update and delete, cascades included.
    """
    try:
        conn.execute(
            "CREATE VIRTUAL TABLE messages_fts USING fts5("
            "content, content='messages', content_rowid='id', tokenize='trigram')"
        )
    except sqlite3.OperationalError as exc:  # no fts5 module, or no trigram tokenizer
        log.info("chat search will scan messages: no FTS5 trigram index (%s)", exc)
        return
    insert = "INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);"
    delete = (
        "INSERT INTO messages_fts (messages_fts, rowid, content)"
        " VALUES ('delete', old.id, old.content);"
    )
    conn.execute(f"CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN {insert} END")
    conn.execute(f"CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN {delete} END")
    conn.execute(
        "CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages"
        f" BEGIN {delete} {insert} END"
    )


def m002_message_images(conn: sqlite3.Connection) -> None:
    """Images attached to user messages, as the encoded bytes the person gave (PNG)."""
    conn.execute(
        "CREATE TABLE message_images ("
        " message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,"
        " position INTEGER NOT NULL,"
        " name TEXT NOT NULL,"
        " data BLOB NOT NULL,"
        " PRIMARY KEY (message_id, position))"
    )
    conn.execute("PRAGMA user_version = 2")


def m003_message_thinking(conn: sqlite3.Connection) -> None:
    """A reasoning model's thinking beside its answer: shown again, never sent back."""
    conn.execute("ALTER TABLE messages ADD COLUMN thinking TEXT")
    conn.execute("PRAGMA user_version = 3")


MIGRATIONS = (m001_chats, m002_message_images, m003_message_thinking)


# -- opening ----------------------------------------------------------------------------------

CHAT_SCHEMA = StoreSchema(
    STORE_FILE_NAME,
    CHAT_STORE_IDENTITY,
    MIGRATIONS,
    probes=(CONVERSATION_SELECT, MESSAGE_SELECT),
    foreign_keys=True,  # a conversation's messages and their images go with it
    synchronous="NORMAL",  # see the module docstring
    warn_newer_than=SCHEMA_VERSION,
)


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return row is not None
