"""The chat history: conversations, messages, streaming saves, crashes, search, damaged files."""

from __future__ import annotations

import logging
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timezone, tzinfo
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.paths import app_paths
from app.stores import chat_store as chat_store_module
from app.stores.chat_records import Change, Conversation, StoredMessage
from app.stores.chat_schema import APPLICATION_ID, SCHEMA_VERSION
from app.stores.chat_store import (
    CONVERSATION_CREATED,
    CONVERSATION_DELETED,
    CONVERSATION_RENAMED,
    CONVERSATION_UPDATED,
    MESSAGE_ADDED,
    MESSAGE_UPDATED,
    MESSAGES_TRUNCATED,
    ChatStore,
)
from app.stores.profile_store import APPLICATION_ID as PROFILES_APPLICATION_ID
from app.stores.stored_history import StoredHistory
from engine.errors import BadInputError
from engine.generation.stats import FinishReason, GenerationStats
from engine.model.chat_message import ChatMessage
from engine.model.image_input import ImageFile

REPO_ROOT = Path(__file__).resolve().parents[2]
STATS = GenerationStats(
    prompt_tokens=42,
    reused_prompt_tokens=30,
    generated_tokens=17,
    time_to_first_token_s=0.21,
    prompt_tokens_per_s=512.5,
    decode_tokens_per_s=23.4,
    finish_reason=FinishReason.STOP,
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ChatStore]:
    with ChatStore(tmp_path / "chats.sqlite3") as chat_store:
        yield chat_store


def raw(path: Path) -> sqlite3.Connection:
    """A plain connection to look at the file the way another program would."""
    return sqlite3.connect(path)


def new_chat(store: ChatStore, title: str = "New chat", **kwargs: object) -> int:
    return store.create_conversation(title, **kwargs).conversation_id  # type: ignore[arg-type]


def contents(store: ChatStore, conversation_id: int) -> list[tuple[str, str, bool]]:
    return [(m.role, m.content, m.complete) for m in store.messages(conversation_id)]


def fts_is_consistent(store: ChatStore) -> bool:
    """True if the search index matches the messages (or there is no index to check)."""
    conn = raw(store.path)
    try:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages_fts'").fetchone():
            conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")
        return True
    except sqlite3.DatabaseError:
        return False
    finally:
        conn.close()


# -- opening and marks -------------------------------------------------------------------------


def test_default_file_is_in_the_data_folder_and_marked_as_ours() -> None:
    with ChatStore() as store:
        assert store.path == app_paths().data_dir / "chats.sqlite3"
        assert store.recovered_from is None
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert store._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    conn = raw(app_paths().data_dir / "chats.sqlite3")
    try:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert APPLICATION_ID != PROFILES_APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        applied = [row[0] for row in conn.execute("SELECT name FROM _migrations")]
        assert applied == ["m001_chats", "m002_message_images", "m003_message_thinking"]
    finally:
        conn.close()


def test_close_twice_and_context_manager(tmp_path: Path) -> None:
    store = ChatStore(tmp_path / "chats.sqlite3")
    store.close()
    store.close()
    with ChatStore(tmp_path / "chats.sqlite3") as again:
        assert again.conversations() == []
    with pytest.raises(sqlite3.ProgrammingError):
        again.conversations()


def test_a_store_refuses_use_from_another_thread(store: ChatStore) -> None:
    errors: list[BaseException] = []

    def use() -> None:
        try:
            store.conversations()
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion below
            errors.append(exc)

    worker = threading.Thread(target=use)
    worker.start()
    worker.join()
    assert len(errors) == 1 and isinstance(errors[0], sqlite3.ProgrammingError)


# -- conversations -----------------------------------------------------------------------------


def test_create_returns_a_change_and_the_conversation_reads_back(store: ChatStore) -> None:
    change = store.create_conversation("Trip  to\nLisbon", "Be brief.", {"temperature": 0.7})
    assert change == Change(CONVERSATION_CREATED, change.conversation_id, None)
    conversation = store.conversation(change.conversation_id)
    assert isinstance(conversation, Conversation)
    assert conversation.title == "Trip to Lisbon"  # one line, single spaces
    assert conversation.system_prompt == "Be brief."
    assert conversation.settings == {"temperature": 0.7}
    assert conversation.created_at == conversation.updated_at
    assert store.create_conversation().conversation_id != change.conversation_id
    assert [c.title for c in store.conversations()] == ["New chat", "Trip to Lisbon"]


def test_rename_system_prompt_and_settings_return_their_changes(store: ChatStore) -> None:
    cid = new_chat(store)
    assert store.rename(cid, "Recipes") == Change(CONVERSATION_RENAMED, cid)
    assert store.set_system_prompt(cid, "You are a chef.") == Change(CONVERSATION_UPDATED, cid)
    assert store.set_settings(cid, {"top_k": 40, "stop": ["</s>"]}) == Change(
        CONVERSATION_UPDATED, cid
    )
    conversation = store.conversation(cid)
    assert (conversation.title, conversation.system_prompt) == ("Recipes", "You are a chef.")
    assert conversation.settings == {"top_k": 40, "stop": ["</s>"]}
    assert conversation.updated_at > conversation.created_at


def test_delete_removes_the_conversation_and_cascades_to_its_messages(store: ChatStore) -> None:
    keep, gone = new_chat(store, "keep"), new_chat(store, "gone")
    store.add_message(keep, "user", "kept words")
    for text in ("hello", "doomed words", "bye"):
        store.add_message(gone, "user", text)
    assert store.delete(gone) == Change(CONVERSATION_DELETED, gone)
    assert [c.id for c in store.conversations()] == [keep]
    with pytest.raises(BadInputError, match=f"no conversation with id {gone}"):
        store.conversation(gone)
    conn = raw(store.path)
    try:
        assert conn.execute("SELECT conversation_id FROM messages").fetchall() == [(keep,)]
    finally:
        conn.close()
    assert store.search("doomed") == []
    assert fts_is_consistent(store)
    reused = store.add_message(keep, "user", "fresh text").message_id  # may reuse a freed id
    assert store.search("doomed") == []
    assert store.search("hello") == []  # a stale index entry would point at the reused id
    assert [c.id for c in store.search("fresh")] == [keep]
    assert reused is not None


def test_conversations_are_listed_newest_updated_first(store: ChatStore) -> None:
    first, second, third = (new_chat(store, t) for t in ("first", "second", "third"))
    assert [c.id for c in store.conversations()] == [third, second, first]
    store.add_message(first, "user", "bump")
    assert [c.id for c in store.conversations()] == [first, third, second]
    store.rename(second, "second, renamed")
    assert [c.id for c in store.conversations()] == [second, first, third]
    message = store.add_message(third, "assistant", "", complete=False).message_id
    assert message is not None
    store.update_message(message, "streamed", complete=False)
    assert [c.id for c in store.conversations()] == [third, second, first]
    store.truncate_after(first, -1)
    assert [c.id for c in store.conversations()] == [first, third, second]


def test_order_follows_actions_even_when_the_clock_stands_still(
    store: ChatStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen = datetime(2025, 5, 1, 12, 0, tzinfo=timezone.utc)

    class StoppedClock(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> StoppedClock:  # type: ignore[override]
            return cls.fromtimestamp(frozen.timestamp(), tz)

    monkeypatch.setattr("app.stores.chat_store.datetime", StoppedClock)
    first, second = new_chat(store, "first"), new_chat(store, "second")
    store.add_message(first, "user", "bump")
    assert [c.id for c in store.conversations()] == [first, second]
    store.rename(second, "again")
    assert [c.id for c in store.conversations()] == [second, first]


# -- messages ----------------------------------------------------------------------------------


def test_add_message_appends_at_the_next_position(store: ChatStore) -> None:
    cid, other = new_chat(store), new_chat(store)
    changes = [
        store.add_message(cid, "user", "Hi"),
        store.add_message(other, "user", "elsewhere"),
        store.add_message(cid, "assistant", "Hello!", stats=STATS),
    ]
    assert [c.kind for c in changes] == [MESSAGE_ADDED] * 3
    assert [c.conversation_id for c in changes] == [cid, other, cid]
    messages = store.messages(cid)
    assert all(isinstance(m, StoredMessage) for m in messages)
    assert [m.id for m in messages] == [changes[0].message_id, changes[2].message_id]
    assert [m.position for m in messages] == [0, 1]
    assert [m.position for m in store.messages(other)] == [0]
    assert messages[0].stats is None
    assert messages[1].stats == STATS.to_dict()
    assert all(m.complete and m.conversation_id == cid for m in messages)


def test_a_streamed_reply_is_added_incomplete_updated_then_completed(store: ChatStore) -> None:
    cid = new_chat(store)
    store.add_message(cid, "user", "Count to three")
    started = store.add_message(cid, "assistant", "", complete=False)
    reply = started.message_id
    assert reply is not None
    for partial in ("One", "One, two"):
        assert store.update_message(reply, partial, complete=False) == Change(
            MESSAGE_UPDATED, cid, reply
        )
        assert contents(store, cid)[-1] == ("assistant", partial, False)
    store.update_message(reply, "One, two, three.", complete=True, stats=STATS.to_dict())
    last = store.messages(cid)[-1]
    assert (last.content, last.complete, last.stats) == ("One, two, three.", True, STATS.to_dict())
    store.update_message(reply, "One, two, three!", complete=True)
    assert store.messages(cid)[-1].stats is None  # stats describe the text they came with


def test_truncate_after_removes_later_messages_and_positions_continue(store: ChatStore) -> None:
    cid = new_chat(store)
    for n in range(5):
        store.add_message(cid, "user" if n % 2 == 0 else "assistant", f"m{n}")
    assert store.truncate_after(cid, 2) == Change(MESSAGES_TRUNCATED, cid)
    assert [m.content for m in store.messages(cid)] == ["m0", "m1", "m2"]
    store.add_message(cid, "assistant", "regenerated")
    assert [(m.position, m.content) for m in store.messages(cid)][-1] == (3, "regenerated")
    store.truncate_after(cid, 10)  # nothing after 10: a no-op, not an error
    assert len(store.messages(cid)) == 4
    store.truncate_after(cid, -1)
    assert store.messages(cid) == []
    assert store.add_message(cid, "user", "fresh start").message_id is not None
    assert [m.position for m in store.messages(cid)] == [0]
    assert fts_is_consistent(store)


def test_history_is_what_the_model_should_see(store: ChatStore) -> None:
    cid = new_chat(store, system_prompt="You are terse.")
    store.add_message(cid, "user", "Capital of France?")
    store.add_message(cid, "assistant", "Paris.")
    store.add_message(cid, "user", "And of Spain?")
    reply = store.add_message(cid, "assistant", "", complete=False).message_id
    assert reply is not None
    expected = [
        ChatMessage("system", "You are terse."),
        ChatMessage("user", "Capital of France?"),
        ChatMessage("assistant", "Paris."),
        ChatMessage("user", "And of Spain?"),
    ]
    assert store.history(cid) == expected  # an empty reply in progress says nothing
    store.update_message(reply, "Mad", complete=False)
    assert store.history(cid) == [*expected, ChatMessage("assistant", "Mad")]
    store.set_system_prompt(cid, "")
    assert store.history(cid)[0] == ChatMessage("user", "Capital of France?")


# -- search ------------------------------------------------------------------------------------


def sqlite_has_trigram_fts() -> bool:
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='trigram')")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def test_the_search_index_exists_when_this_sqlite_can_build_it(store: ChatStore) -> None:
    conn = raw(store.path)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert ("messages_fts" in tables) == sqlite_has_trigram_fts()


@pytest.mark.parametrize("use_index", [True, False], ids=["index", "scan"])
def test_search_finds_titles_and_message_text_ignoring_case(
    store: ChatStore, use_index: bool
) -> None:
    if use_index and not sqlite_has_trigram_fts():
        pytest.skip("this SQLite has no FTS5 trigram tokenizer")
    store._has_fts = use_index  # both paths must give the same answers
    pasta = new_chat(store, "Pasta Recipes")
    trip = new_chat(store, "Holiday")
    other = new_chat(store, "Unrelated")
    store.add_message(trip, "user", "Plan a week in LISBON with a 100% budget_cap")
    store.add_message(trip, "assistant", 'Day one: the "Alfama" district. Café breakfast.')
    store.add_message(other, "user", "nothing to see")
    assert [c.id for c in store.search("pasta")] == [pasta]
    assert [c.id for c in store.search("RECIPE")] == [pasta]
    assert [c.id for c in store.search("lisbon")] == [trip]
    assert [c.id for c in store.search("  Alfama ")] == [trip]
    assert [c.id for c in store.search('"alfama"')] == [trip]  # quotes are text, not syntax
    assert [c.id for c in store.search("CAFÉ")] == [trip]  # beyond ASCII
    assert [c.id for c in store.search("0% b")] == [trip]  # % and _ are not wildcards
    assert store.search("1_0") == []
    assert [c.id for c in store.search("in")] == [other, trip]  # short: scanned, newest first
    assert [c.id for c in store.search("e")] == [other, trip, pasta]
    assert store.search("missing words") == []
    assert [c.id for c in store.search("   ")] == [c.id for c in store.conversations()]


def test_search_finds_text_written_by_a_streamed_update(store: ChatStore) -> None:
    cid = new_chat(store)
    reply = store.add_message(cid, "assistant", "", complete=False).message_id
    assert reply is not None
    store.update_message(reply, "the word is marmalade", complete=False)
    assert [c.id for c in store.search("MARMALADE")] == [cid]
    store.update_message(reply, "changed my mind", complete=True)
    assert store.search("marmalade") == []
    assert fts_is_consistent(store)


# -- persistence and crashes -------------------------------------------------------------------


def test_everything_persists_across_two_store_objects(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    with ChatStore(path) as first:
        cid = new_chat(first, "Kept", system_prompt="Sys", settings={"seed": 3})
        first.add_message(cid, "user", "question")
        first.add_message(cid, "assistant", "answer", stats=STATS)
        before = (first.conversations(), first.messages(cid))
    with ChatStore(path) as second:
        assert second.recovered_from is None
        assert (second.conversations(), second.messages(cid)) == before
        second.add_message(cid, "user", "follow-up")
        assert [m.position for m in second.messages(cid)] == [0, 1, 2]


def test_after_a_close_mid_reply_discard_keeps_partial_text_and_drops_empty(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chats.sqlite3"
    with ChatStore(path) as before:
        cid, other = new_chat(before, "talking"), new_chat(before, "just started")
        before.add_message(cid, "user", "Tell me a story")
        partial = before.add_message(cid, "assistant", "", complete=False).message_id
        assert partial is not None
        before.update_message(partial, "Once upon a", complete=False)
        before.add_message(other, "user", "Hi")
        before.add_message(other, "assistant", "", complete=False)
    with ChatStore(path) as after:
        assert contents(after, cid)[-1] == ("assistant", "Once upon a", False)
        assert after.discard_incomplete() == 1
        assert contents(after, cid) == [
            ("user", "Tell me a story", True),
            ("assistant", "Once upon a", True),
        ]
        assert contents(after, other) == [("user", "Hi", True)]
        assert after.discard_incomplete() == 0
        assert after.add_message(other, "assistant", "Hello").message_id is not None


def test_positions_continue_after_the_gap_a_discarded_reply_leaves(store: ChatStore) -> None:
    cid = new_chat(store)
    store.add_message(cid, "user", "first")
    store.add_message(cid, "assistant", "", complete=False)  # never streamed a word
    store.add_message(cid, "user", "second")
    assert store.discard_incomplete() == 1
    assert [m.position for m in store.messages(cid)] == [0, 2]
    store.add_message(cid, "assistant", "answer")
    assert [(m.position, m.content) for m in store.messages(cid)][-1] == (3, "answer")


def test_a_killed_process_loses_only_the_unsaved_part_of_the_reply(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    script = f"""
import os
from pathlib import Path
from app.stores.chat_store import ChatStore
store = ChatStore(Path({str(path)!r}))
cid = store.create_conversation("killed").conversation_id
store.add_message(cid, "user", "Write a poem")
reply = store.add_message(cid, "assistant", "", complete=False).message_id
store.update_message(reply, "Roses are red", complete=False)
os._exit(9)  # no close, no cleanup: as if the process were killed
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, timeout=60
    )
    assert result.returncode == 9, result.stderr.decode()
    with ChatStore(path) as store:
        assert store.recovered_from is None
        cid = store.conversations()[0].id
        assert store.discard_incomplete() == 0
        assert store.history(cid) == [
            ChatMessage("user", "Write a poem"),
            ChatMessage("assistant", "Roses are red"),
        ]


# -- damaged or foreign files ------------------------------------------------------------------
# A damaged or foreign file is moved aside by every store alike: tests/app/test_store_recovery.py


def test_a_directory_in_the_way_is_bad_input_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    path.mkdir()
    with pytest.raises(BadInputError, match="not a file"):
        ChatStore(path)
    assert path.is_dir()


def test_a_hand_edited_settings_row_reads_as_empty_with_a_warning(
    store: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    cid = new_chat(store, settings={"seed": 1})
    conn = raw(store.path)
    conn.execute("UPDATE conversations SET settings_json = '{broken' WHERE id = ?", (cid,))
    conn.commit()
    conn.close()
    with caplog.at_level(logging.WARNING, logger="app.stores.chat_store"):
        assert store.conversation(cid).settings == {}
    assert f"settings of conversation {cid}" in caplog.text


# -- bad input ---------------------------------------------------------------------------------

BAD_CALLS: dict[str, tuple[Callable[[ChatStore, int, int], object], str]] = {
    "empty title": (lambda s, c, m: s.create_conversation("  \n "), "title cannot be empty"),
    "empty rename": (lambda s, c, m: s.rename(c, ""), "title cannot be empty"),
    "title not text": (lambda s, c, m: s.rename(c, 5), "title must be text"),
    "rename unknown": (lambda s, c, m: s.rename(999, "x"), "no conversation with id 999"),
    "delete unknown": (lambda s, c, m: s.delete(999), "no conversation with id 999"),
    "get unknown": (lambda s, c, m: s.conversation(999), "no conversation with id 999"),
    "messages unknown": (lambda s, c, m: s.messages(999), "no conversation with id 999"),
    "history unknown": (lambda s, c, m: s.history(999), "no conversation with id 999"),
    "add to unknown": (lambda s, c, m: s.add_message(999, "user", "x"), "no conversation"),
    "truncate unknown": (lambda s, c, m: s.truncate_after(999, 0), "no conversation"),
    "prompt unknown": (lambda s, c, m: s.set_system_prompt(999, "x"), "no conversation"),
    "settings unknown": (lambda s, c, m: s.set_settings(999, {}), "no conversation"),
    "update unknown": (lambda s, c, m: s.update_message(999, "x", True), "no message with id"),
    "id not a number": (lambda s, c, m: s.conversation("1"), "must be a whole number"),  # type: ignore[arg-type]
    "id a bool": (lambda s, c, m: s.delete(True), "must be a whole number"),
    "bad role": (lambda s, c, m: s.add_message(c, "tool", "x"), "role must be one of"),
    "content not text": (lambda s, c, m: s.add_message(c, "user", None), "must be text"),  # type: ignore[arg-type]
    "lone surrogate": (lambda s, c, m: s.add_message(c, "user", "a\ud800"), "not valid Unicode"),
    "incomplete user": (
        lambda s, c, m: s.add_message(c, "user", "x", complete=False),
        "only an assistant reply can be incomplete",
    ),
    "complete not bool": (lambda s, c, m: s.update_message(m, "x", 1), "True or False"),  # type: ignore[arg-type]
    "settings not dict": (lambda s, c, m: s.set_settings(c, [1]), "settings must be a dict"),  # type: ignore[arg-type]
    "settings not JSON": (lambda s, c, m: s.set_settings(c, {"x": {1, 2}}), "as JSON"),
    "stats not JSON": (
        lambda s, c, m: s.update_message(m, "x", True, {"t": float("nan")}),
        "as JSON",
    ),
    "stats wrong type": (lambda s, c, m: s.add_message(c, "user", "x", stats=3), "stats must"),  # type: ignore[arg-type]
    "position below -1": (lambda s, c, m: s.truncate_after(c, -2), "whole number >= -1"),
    "search not text": (lambda s, c, m: s.search(None), "search must be text"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_input_is_refused_with_one_line_and_changes_nothing(
    case: str, store: ChatStore
) -> None:
    cid = new_chat(store, "existing")
    mid = store.add_message(cid, "assistant", "reply").message_id
    assert mid is not None
    before = (store.conversations(), store.messages(cid))
    call, message = BAD_CALLS[case]
    with pytest.raises(BadInputError, match=re.escape(message)) as caught:
        call(store, cid, mid)
    assert "\n" not in str(caught.value)
    assert (store.conversations(), store.messages(cid)) == before


# -- content -----------------------------------------------------------------------------------


def test_unicode_and_very_long_content_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    odd = "Ünïcödé ✓ 中文 العربية 👩‍👩‍👧 \x00 nul, tabs\tand\r\nnewlines"
    long = ("A long reply. " * 200_000) + "END"  # about 2.8 MB
    with ChatStore(path) as store:
        cid = new_chat(store, "📚 Ünïcödé title", system_prompt=odd, settings={"名前": "値"})
        store.add_message(cid, "user", odd)
        store.add_message(cid, "assistant", long)
    with ChatStore(path) as store:
        conversation = store.conversation(cid)
        assert conversation.title == "📚 Ünïcödé title"
        assert (conversation.system_prompt, conversation.settings) == (odd, {"名前": "値"})
        assert [m.content for m in store.messages(cid)] == [odd, long]
        assert [c.id for c in store.search("中文")] == [cid]
        assert [c.id for c in store.search("\x00 NUL")] == [cid]  # scanned: FTS stops at NUL
        assert [c.id for c in store.search("reply. END")] == [cid]
        assert fts_is_consistent(store)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from(["system", "user", "assistant"]), st.text(max_size=60)),
        max_size=12,
    )
)
def test_any_sequence_of_adds_gets_positions_in_order(
    tmp_path_factory: pytest.TempPathFactory, turns: list[tuple[str, str]]
) -> None:
    path = tmp_path_factory.mktemp("hypothesis") / "chats.sqlite3"
    with ChatStore(path) as store:
        cid, other = new_chat(store), new_chat(store)
        for n, (role, text) in enumerate(turns):
            store.add_message(cid, role, text)
            if n % 3 == 0:
                store.add_message(other, "user", "interleaved")
        messages = store.messages(cid)
        assert [m.position for m in messages] == list(range(len(turns)))
        assert [(m.role, m.content) for m in messages] == turns
        assert fts_is_consistent(store)


def test_images_are_saved_with_their_user_message_and_go_with_it(store: ChatStore) -> None:
    conversation = store.create_conversation("pictures").conversation_id
    images = (ImageFile("a.png", b"\x89PNG first"), ImageFile("b.png", b"\x89PNG second"))
    asked = store.add_message(conversation, "user", "What are these?", images=images)
    store.add_message(conversation, "assistant", "Two pictures.")
    store.add_message(conversation, "user", "Thanks")
    shown = store.messages(conversation)
    assert [m.images for m in shown] == [images, (), ()]
    assert store.history(conversation)[0] == ChatMessage("user", "What are these?", images)
    with pytest.raises(BadInputError, match="only user messages carry images"):
        store.add_message(conversation, "assistant", "no", images=images[:1])
    store.truncate_after(conversation, -1)
    store.add_message(conversation, "user", "again", images=images[1:])
    assert store.messages(conversation)[0].images == images[1:]
    store.delete(conversation)
    count = store._conn.execute("SELECT COUNT(*) FROM message_images").fetchone()[0]
    assert count == 0 and asked.message_id  # the images went with their conversation


def test_a_replys_thinking_is_saved_beside_it_and_left_out_of_the_history(
    isolated_home: Path,
) -> None:
    with ChatStore() as store:
        conversation = store.create_conversation("Thinking").conversation_id
        store.add_message(conversation, "user", "Hi")
        reply = store.add_message(conversation, "assistant", "", complete=False).message_id
        store.update_message(reply, "Hello!", True, thinking="They greet me; greet back.")
    with ChatStore() as store:
        saved = store.messages(conversation)[-1]
        assert (saved.content, saved.thinking) == ("Hello!", "They greet me; greet back.")
        history = store.history(conversation)
        assert history[-1].content == "Hello!" and not history[-1].thinking


def test_messages_can_be_read_without_their_images_and_each_image_on_demand(
    store: ChatStore,
) -> None:
    conversation = store.create_conversation("photos").conversation_id
    images = (ImageFile("a.png", b"\x89PNG first"), ImageFile("b.png", b"\x89PNG second"))
    asked = store.add_message(conversation, "user", "Look", images=images).message_id
    store.add_message(conversation, "assistant", "Nice.")
    light = store.messages(conversation, with_images=False)
    assert [m.images for m in light] == [(), ()]
    assert [m.image_names for m in light] == [("a.png", "b.png"), ()]
    assert store.image(asked, 1) == images[1] and store.image(asked, 0) == images[0]
    with pytest.raises(BadInputError, match="has no image 2"):
        store.image(asked, 2)


def test_one_message_can_be_deleted_with_its_images(store: ChatStore) -> None:
    conversation = store.create_conversation("tidy").conversation_id
    first = store.add_message(conversation, "user", "one", images=(ImageFile("a.png", b"x"),))
    store.add_message(conversation, "assistant", "two")
    store.delete_message(first.message_id)
    assert [m.content for m in store.messages(conversation)] == ["two"]
    assert store._conn.execute("SELECT COUNT(*) FROM message_images").fetchone()[0] == 0
    with pytest.raises(BadInputError, match="no message with id"):
        store.delete_message(first.message_id)


def test_a_long_conversation_is_read_back_a_page_and_a_context_window_at_a_time(
    store: ChatStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversation = store.create_conversation("Long").conversation_id
    answer = "a" * 100
    for number in range(10):
        store.add_message(conversation, "user", f"q{number}")
        store.add_message(conversation, "assistant", answer)
    page = store.messages_before(conversation, 4)
    assert [m.content for m in page] == ["q8", answer, "q9", answer]
    older = store.messages_before(conversation, 4, page[0].position)
    assert [m.content for m in older] == ["q6", answer, "q7", answer]
    assert store.messages_before(conversation, 4, store.messages(conversation)[0].position) == []

    monkeypatch.setattr(chat_store_module, "HISTORY_PAGE", 4)  # 2 exchanges, 206 characters
    newest = store.history(conversation, max_chars=250)  # a second page reaches 250
    assert [turn.content for turn in newest] == ["q6", answer, "q7", answer] + [
        "q8", answer, "q9", answer,
    ]  # fmt: skip
    assert len(store.history(conversation)) == 20 == len(store.history(conversation, 10**6))
    q9 = store.messages(conversation)[-2].position  # asked for before the last answer came
    assert [turn.content for turn in store.history(conversation, 250, through=q9)][-1] == "q9"


def test_a_stored_history_is_read_where_it_is_asked_for(store: ChatStore) -> None:
    conversation = store.create_conversation("Held", system_prompt="Be brief.").conversation_id
    store.add_message(conversation, "user", "Hi")
    store.add_message(conversation, "assistant", "Hello.")
    store.add_message(conversation, "user", "Held while the model loads")
    history = tuple(store.history(conversation))
    answers: list[tuple[ChatMessage, ...]] = []
    stored = StoredHistory(store.path, conversation, None, store.last_position(conversation))
    store.add_message(conversation, "assistant", "Sent after it was asked for: not history")

    def engine() -> None:  # another thread, with its own connection, as the engine's
        answers.extend([stored.read(), replace(stored, leave_out_last=True).read()])

    worker = threading.Thread(target=engine)
    worker.start()
    worker.join()
    assert answers == [history, history[:-1]] and history[0] == ChatMessage("system", "Be brief.")
