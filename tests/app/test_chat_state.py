"""The chat window's state without Qt: conversations, the streamed reply, what the input may do,
and the model it talks to (app.conversation)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.conversation.chat_state import (
    N_CTX_KEY,
    NEW_TITLE,
    SAVE_INTERVAL_S,
    THINKING_KEY,
    WAIT_FOR_MODEL,
    WAIT_FOR_REPLY,
    ChatState,
)
from app.conversation.model_status import LOADING_LABEL, NO_MODEL_LABEL, ModelStatus
from app.engine_host.events import ModelLoaded, ReplyFinished, RequestFailed
from app.model_lifecycle.load_planning import LoadRequest
from app.stores.chat_store import ChatStore
from engine.generation.sampling import SamplingSettings
from engine.generation.stats import FinishReason, GenerationStats
from engine.model.image_input import ImageFile

N_CTX = 2048


class Clock:
    """Time the test moves by hand: when a streamed reply is saved depends on it."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ChatStore]:
    with ChatStore(tmp_path / "chats.sqlite3") as chats:
        yield chats


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(store: ChatStore, clock: Clock) -> ChatState:
    model = ModelStatus(LoadRequest("/models/a.gguf", N_CTX, None))
    chat = ChatState(store, SamplingSettings(temperature=0.0), model, clock=clock)
    chat.open_first()
    return chat


def loaded(model: ModelStatus, request_id: int = 1, **changes: object) -> ModelLoaded:
    model.request_id = request_id
    fields: dict = dict(
        request_id=request_id, model_path=model.model_path, model_name="Tiny", architecture="llama",
        n_params=1, n_ctx=model.n_ctx, load_seconds=0.1, load_params={},
        prompt_format="chatml", prompt_format_reason="its template",
    )  # fmt: skip
    event = ModelLoaded(**{**fields, **changes})
    assert model.loaded(event)
    return event


def finished(request_id: int, text: str, thinking: str = "") -> ReplyFinished:
    stats = GenerationStats(10, 0, 5, 0.1, 100.0, 20.0, FinishReason.STOP)
    return ReplyFinished(request_id, text, stats, 0, thinking=thinking)


def test_the_first_start_opens_a_new_chat_and_a_restart_the_newest(store: ChatStore) -> None:
    model = ModelStatus(LoadRequest("/m.gguf", N_CTX, None))
    first = ChatState(store, SamplingSettings(), model)
    opened = first.open_first()
    assert first.title() == NEW_TITLE
    newer = store.create_conversation("newer").conversation_id
    again = ChatState(store, SamplingSettings(), model)
    assert again.open_first() == newer and again.open_first(opened) == opened
    assert again.open_first(10_000) == newer  # a conversation deleted meanwhile


def test_nothing_can_be_sent_before_the_model_loads_nor_during_a_reply(state: ChatState) -> None:
    assert state.cannot_send() == WAIT_FOR_MODEL
    loaded(state.model)
    assert state.cannot_send() == ""
    assert "cannot see images" in state.cannot_send(with_images=True)
    state.ask("hello")
    assert state.cannot_send() == WAIT_FOR_REPLY and not state.can_change_messages()


def test_a_reply_streams_is_saved_now_and_then_and_whole_at_the_end(
    state: ChatState, store: ChatStore, clock: Clock
) -> None:
    loaded(state.model)
    turn = state.ask("Why is the sky blue?")
    assert turn.retitled and state.title() == "Why is the sky blue?"
    assert turn.reply.streaming and turn.reply.text == ""
    assert state.reply is not None
    state.reply.request_id = 7
    assert state.streamed(8, text="someone else's") is None
    clock.now += SAVE_INTERVAL_S + 0.1
    state.streamed(7, thinking="light scatters")
    state.streamed(7, text="Rayleigh")  # within the interval: not saved yet
    saved = store.messages(state.conversation_id or 0)[-1]
    assert (saved.content, saved.thinking, saved.complete) == ("", "light scatters", False)
    row = state.finished(finished(7, "Rayleigh scattering.", "light scatters"))
    assert row is not None and not row.streaming and row.stats is not None
    saved = store.messages(state.conversation_id or 0)[-1]
    assert (saved.content, saved.complete) == ("Rayleigh scattering.", True)
    assert state.reply is None and state.context_used == 15


def test_a_failed_or_interrupted_reply_keeps_what_it_said(
    state: ChatState, store: ChatStore
) -> None:
    loaded(state.model)
    state.ask("one")
    assert state.reply is not None
    state.reply.request_id = 3
    state.streamed(3, text="partial")
    assert state.failed(4) is None and state.reply is not None  # another request's failure
    row = state.failed(3)
    assert row is not None and row.text == "partial" and state.reply is None
    state.ask("two")
    state.streamed(state.reply.request_id or 0)  # no request id yet: nothing is ours
    state.close()  # the app closes mid-reply
    assert all(m.complete for m in store.messages(state.conversation_id or 0))


def test_the_rows_shown_leave_out_an_empty_unfinished_reply(state: ChatState) -> None:
    loaded(state.model)
    state.ask("hi", [ImageFile("cat.png", b"\x89PNG")])
    rows = state.rows()
    assert [(r.role, r.image_names) for r in rows] == [("user", ("cat.png",))]
    assert state.shown_conversation == state.conversation_id


def test_taking_back_the_last_message_removes_it_and_its_reply(state: ChatState) -> None:
    loaded(state.model)
    state.ask("first")
    state.finished(finished(0, "answer one"))  # request id None: not this reply
    assert state.reply is not None
    state.reply.request_id = 1
    state.finished(finished(1, "answer one"))
    state.ask("second", [ImageFile("dog.png", b"png bytes")])
    state.reply.request_id = 2
    state.finished(finished(2, "answer two"))
    last = state.last_user_message()
    assert last is not None and last.content == "second"
    assert [image.data for image in last.images] == [b"png bytes"]
    state.take_back(last)
    assert [r.text for r in state.rows()] == ["first", "answer one"]
    assert [m.content for m in state.stored_history().read()] == ["first", "answer one"]


def test_an_edited_reply_and_a_deleted_message_change_what_the_model_hears(
    state: ChatState,
) -> None:
    loaded(state.model)
    state.ask("q")
    state.reply.request_id = 1  # type: ignore[union-attr]
    row = state.finished(finished(1, "wrong"))
    assert row is not None and row.message_id is not None
    state.edit_reply(row.message_id, "right")
    assert [m.content for m in state.stored_history().read()] == ["q", "right"]
    state.delete_message(row.message_id)
    assert [m.content for m in state.stored_history().read()] == ["q"]


def test_settings_thinking_and_context_length_are_the_conversations_own(
    state: ChatState,
) -> None:
    assert state.sampling().temperature == 0.0 and state.n_ctx() == N_CTX
    state.set_sampling({"temperature": 0.5, THINKING_KEY: False, N_CTX_KEY: 4096})
    assert state.sampling().temperature == 0.5
    assert state.thinking() is None  # the model has no Think switch
    loaded(state.model, thinking_switch=True)
    assert state.thinking() is False
    assert state.n_ctx() == 4096 and state.needs_reload()
    assert state.set_system_prompt(" be brief ") and not state.set_system_prompt("be brief")
    assert state.stored_history().read()[0].content == "be brief"


def test_the_list_searches_titles_and_renames_skip_blank_or_same_titles(
    state: ChatState,
) -> None:
    conversation = state.conversation_id or 0
    assert not state.rename(conversation, "   ") and not state.rename(conversation, NEW_TITLE)
    assert state.rename(conversation, "  Heat   pumps ")
    state.new_conversation()
    assert [title for _id, title in state.listed("heat")] == ["Heat pumps"]
    assert len(state.listed("")) == 2


def test_deleting_the_open_conversation_opens_the_newest_other(state: ChatState) -> None:
    first = state.conversation_id
    second = state.new_conversation()
    assert state.delete_open() == first and state.conversation_id == first
    assert state.delete_open() is None and second != first


def test_a_refused_file_leaves_the_loaded_model_and_a_failed_load_none() -> None:
    model = ModelStatus(LoadRequest("/models/a.gguf", N_CTX, None))
    loaded(model)
    label = model.label
    assert "Tiny" in label and model.coming()
    model.begin(LoadRequest("/models/broken.gguf", 4096, None))
    assert not model.ready and model.label == LOADING_LABEL
    model.request_id = 2
    assert model.load_failed(RequestFailed(2, "not a GGUF", bad_input=True))
    assert model.ready and model.label == label and model.model_path == "/models/a.gguf"
    model.begin(LoadRequest("/models/big.gguf", N_CTX, None))
    assert not model.load_failed(RequestFailed(3, "out of memory", bad_input=False))
    assert model.label == NO_MODEL_LABEL and not model.coming()


def test_a_load_answer_for_an_older_request_is_ignored() -> None:
    model = ModelStatus(LoadRequest("/models/a.gguf", N_CTX, None))
    model.request_id = 5
    event = ModelLoaded(4, "/models/a.gguf", "Old", "llama", 1, N_CTX, 0.1, {})
    assert not model.loaded(event) and not model.ready
    assert model.request().model_path == "/models/a.gguf" and model.budget() is None


def test_the_history_asked_for_is_what_the_chat_held_then_even_read_later(
    state: ChatState, store: ChatStore
) -> None:
    """The engine reads it after the window has moved on: a message sent in between is
    asked on its own, never also as history (an empty chat's history stays empty)."""
    empty = state.stored_history()
    state.ask("First question")
    assert empty.read() == ()
    conversation = state.conversation_id
    assert conversation is not None
    store.update_message(state.reply.message_id, "First answer", True)  # type: ignore[union-attr]
    state.reply = None
    asked = state.stored_history()
    state.ask("Second question")
    assert [turn.content for turn in asked.read()] == ["First question", "First answer"]
    held = state.stored_history(leave_out_last=True)  # the second is held for the model
    assert [turn.content for turn in held.read()] == ["First question", "First answer"]
