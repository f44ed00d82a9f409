"""The terminal chat keeps what is said where the window reads it, and answers its own commands.

Each test drives `shardchat chat` on a pseudo-terminal as a person types into it, then
reads the history back through ChatStore: the store the window opens (ui.desktop) and
lists, with the calls it reads a conversation with.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import string
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image
from test_cli_interactive import Terminal  # the pseudo-terminal driver, same folder

from app.cli.commands.chat_command import open_engine
from app.cli.commands.terminal_chat import TerminalChat, Vision
from app.stores.chat_records import StoredMessage
from app.stores.chat_store import ChatStore
from engine.generation.sampling import SamplingSettings
from engine.llama.load_params import LoadParams
from engine.model.default_model import default_model_path
from tests.synthetic_vision import write_synthetic_vlm

# one thread: llama.cpp's spinning threads crawl on a machine busy with other tests
SHORT = ("chat", "--threads", "1", "--temperature", "0", "--max-tokens", "8", "--ctx", "512")
LONG = ("chat", "--threads", "1", "--temperature", "0", "--max-tokens", "2000")


def test_a_terminal_conversation_is_saved_where_the_window_reads_it() -> None:
    with Terminal(*SHORT, "--system", "You are terse.") as term:
        term.expect("> ")
        term.type("/help\n")
        listed = term.expect("> ")
        assert all(word in listed for word in ("/new", "/system TEXT", "/image PATH", "/exit"))
        term.type("/frobnicate now\n")
        assert "/frobnicate is not a command; /help lists them" in term.expect("> ")
        term.type("/image photo.png\n")
        assert "cannot see images: it has no vision projector" in term.expect("> ")
        os.write(term.fd, b"bad bytes \xff\xfe\n")  # from a terminal not set to UTF-8
        assert "what was typed is not UTF-8 text" in term.expect("> ")
        term.type("/system You answer in one word.\n")
        term.expect("(system prompt set)")
        term.type("What is the capital of France?\n")
        term.expect("tokens/s")
        term.type("/new\n")
        term.expect("(new conversation)")
        term.type("word " * 600 + "\n")  # refused: it never reaches the model, nor the history
        term.expect("too long for the context window")
        term.type("//etc/hosts is a file\n")  # "//": a message that starts with "/"
        term.expect("tokens/s")
        term.expect("> ")
        term.type("\x04")  # Ctrl-D
        term.expect("(saved as conversation")
        assert term.exit_code() == 0
    with ChatStore() as store:
        second, first = store.conversations()  # newest first, as the window lists them
        assert first.title == "What is the capital of France?"
        assert first.system_prompt == "You answer in one word."
        asked, answered = store.messages(first.id)
        assert (asked.role, asked.content) == ("user", "What is the capital of France?")
        assert answered.role == "assistant" and answered.complete and answered.content.strip()
        assert answered.stats is not None and answered.stats["generated_tokens"] >= 1
        assert [m.role for m in store.history(first.id)] == ["system", "user", "assistant"]
        assert second.title == "/etc/hosts is a file" and second.system_prompt == "You are terse."
        assert [m.content for m in store.messages(second.id)][0] == "/etc/hosts is a file"
        assert len(store.messages(second.id)) == 2  # no slash word, no refused message


def test_ctrl_c_and_a_kill_lose_nothing_that_was_said() -> None:
    """The kill must land while a reply streams. What the model says after a cancelled reply
    depends on where Ctrl-C cut it: asked "Now tell me about a knight." it ended within 70
    tokens after some cuts, before a save mid-stream (CI met one). Asked for a very long
    story it went past 150 tokens after every cut tried (1-200 tokens); should one end
    first anyway, the next is asked, and every reply that ended must be saved whole."""
    asks = [f"Write a very long story about a {what}." for what in ("knight", "wizard", "ship")]
    with Terminal(*LONG) as term:
        term.expect("> ")
        term.type("Write a very long story about a dragon.\n")
        _wait_for(lambda: _streaming_reply(0), "the first reply saved while it streams")
        term.type("\x03")  # Ctrl-C while the reply streams: it stops, saved as it stands
        assert "cancelled" in term.expect("]")
        partial = None
        for position, ask in enumerate(asks, start=1):
            term.expect("> ")
            term.type(ask + "\n")
            reply = _wait_for(lambda p=2 * position: _reply_with_text(p), f"a reply to {ask!r}")
            if not reply.complete:
                partial = reply
                break
        assert partial is not None, "every reply ended before it was seen streaming"
        os.kill(term.pid, signal.SIGKILL)  # nothing can be saved from here on
        os.waitpid(term.pid, 0)
    with ChatStore() as store:
        store.discard_incomplete()  # what the window does when it starts
        (conversation,) = store.conversations()
        story, cancelled, *exchanges = store.messages(conversation.id)
    assert story.content == "Write a very long story about a dragon."
    assert cancelled.complete and cancelled.content.strip()
    assert cancelled.stats is not None and cancelled.stats["finish_reason"] == "cancelled"
    assert [m.content for m in exchanges[::2]] == asks[: len(exchanges) // 2]
    assert all(reply.complete and reply.content for reply in exchanges[1::2])
    assert exchanges[-1].content.startswith(partial.content)


def test_make_run_without_a_display_chats_in_the_terminal_and_saves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)  # what `make run` sees on a headless machine
    with Terminal("gui") as term:
        term.expect("no display here; starting the terminal chat instead")
        term.expect("> ")
        term.type("Hi\n")
        _wait_for(lambda: _reply_with_text(0), "the reply saved")
        term.type("\x03")  # stops the reply if it still streams, else ends the session
        with contextlib.suppress(OSError):  # the session may have ended already
            term.expect("> ", timeout=10)
            term.type("\x04")
        assert term.exit_code() == 0
    with ChatStore() as store:
        (conversation,) = store.conversations()
        asked, answered = store.messages(conversation.id)
    assert conversation.title == "Hi" and asked.content == "Hi"
    assert answered.complete and answered.content


def test_a_ctrl_c_just_after_a_reply_ends_neither_ends_the_session_nor_cuts_the_save() -> None:
    """CI hit this window: Ctrl-C pressed to stop a reply that had just ended landed after
    the stream, before the next prompt, and ended the session with exit 130. Here it lands
    exactly there, in the reply's `on_reply` (its statistics line)."""
    lines = iter(["Hi", "/exit"])
    read: list[str] = []
    interrupted: list[str] = []

    def read_line() -> str | None:
        read.append(next(lines))
        return read[-1]

    def ctrl_c_as_the_reply_ends(_reply: object) -> None:
        try:
            signal.raise_signal(signal.SIGINT)  # its handler runs before this returns
        except KeyboardInterrupt:
            interrupted.append("KeyboardInterrupt")

    settings = SamplingSettings(temperature=0.0, max_tokens=2)
    params = LoadParams(str(default_model_path()), n_ctx=512, n_threads=1)
    with open_engine() as engine, ChatStore() as store:
        engine.call(engine.worker.load_model(params))
        vision = Vision(False, "SmolLM2")
        TerminalChat(engine, store, settings, None, vision, ctrl_c_as_the_reply_ends).run(read_line)
        (conversation,) = store.conversations()
        asked, answered = store.messages(conversation.id)
    assert interrupted == [] and read == ["Hi", "/exit"]  # the session went on to /exit
    assert asked.content == "Hi" and answered.complete and answered.content


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, _projector = write_synthetic_vlm(tmp_path_factory.mktemp("vlm"))
    return model  # its projector lies beside it: the terminal chat finds it


def test_an_image_goes_with_the_next_message_and_bad_ones_are_one_line(
    vlm: Path, tmp_path: Path
) -> None:
    picture = tmp_path / "orange.png"
    Image.new("RGB", (64, 48), "orange").save(picture)
    (tmp_path / "notes.png").write_text("not an image")
    with Terminal("chat", "--threads", "1", "--model", str(vlm), "--max-tokens", "4") as term:
        term.expect("> ")
        term.type(f"/image {tmp_path / 'missing.png'}\n")
        assert "missing.png: no such image file" in term.expect("> ")
        term.type(f"/image '{tmp_path / 'notes.png'}'\n")  # quoted, as a dropped file is pasted
        assert "notes.png" in term.expect("> ")
        term.type(f"/image {picture}\n")
        term.expect("(orange.png goes with your next message)")
        term.type("What colour is it?\n")
        term.expect("tokens/s")
        term.expect("> ")
        term.type("/exit\n")
        assert term.exit_code() == 0
    with ChatStore() as store:
        (conversation,) = store.conversations()
        asked, answered = store.messages(conversation.id)
    assert asked.content == "What colour is it?" and asked.image_names == ("orange.png",)
    assert asked.images[0].data == picture.read_bytes()
    assert answered.complete and answered.role == "assistant"


def _streaming_reply(position: int) -> StoredMessage | None:
    """The reply at `position` of the one conversation, once saved incomplete with text."""
    with ChatStore() as store:
        conversations = store.conversations()
        if not conversations:
            return None
        messages = store.messages(conversations[0].id)
    if len(messages) <= position + 1:
        return None
    reply = messages[position + 1]
    return reply if not reply.complete and reply.content else None


def _reply_with_text(position: int) -> StoredMessage | None:
    """The reply at `position` of the one conversation, once it has text, saved or streaming."""
    with ChatStore() as store:
        conversations = store.conversations()
        messages = store.messages(conversations[0].id) if conversations else []
    reply = messages[position + 1] if len(messages) > position + 1 else None
    return reply if reply is not None and reply.content else None


def _wait_for(found: Callable[[], StoredMessage | None], what: str) -> StoredMessage:
    """Poll the history until `found` sees what the chat saved (the chat runs elsewhere)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (message := found()) is not None:
            return message
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# --- a corpus of typed lines, run through one session in this process ---

KNOWN = ("/help", "/new", "/reset", "/system", "/image", "/exit", "/quit")
OUTCOMES = ("answered", "not a command", "refused", "saved with its reply", "ignored")


def typed_corpus(folder: Path, seed: int = 28) -> list[str]:
    """Lines a person might type, generated: slash words real and made up, commands with odd
    arguments, messages in many scripts and control characters, bytes that are not UTF-8,
    a message too long for the context. Seeded, so a failure can be replayed."""
    rng = random.Random(seed)
    letters = string.ascii_letters + string.digits + string.punctuation + "üß中🐉"
    made_up = ["/" + "".join(rng.choices(letters, k=rng.randint(1, 12))) for _ in range(40)]
    made_up = [w for w in made_up if w.split(" ")[0].lower() not in KNOWN and w[1:2] != "/"]
    edges = ["/", "/ ", "/\t", "/HELP", "/Help me", "/../etc/passwd", "/help/", "/systemic x"]
    (folder / "empty.png").write_bytes(b"")
    (folder / "notes.png").write_text("not an image")
    Image.new("RGB", (8, 8), "red").save(folder / "red.png")
    images = [folder / "missing.png", folder, folder / "empty.png", folder / "notes.png",
              folder / "red.png", "~/nowhere.png", "x" * 5000]  # fmt: skip
    commands = ["/help", "/new", "/reset", "/system", "/system off", "/system  ",
                *[f"/system {_words(rng, 6)}" for _ in range(4)],
                "/image", *[f"/image {path}" for path in images],
                f"/image '{folder}/red.png'"]  # fmt: skip
    messages = [_words(rng, rng.randint(1, 12)) for _ in range(5)] + [
        "nul \x00 inside", "emoji 🐉🔥", "مرحبا بالعالم", "\x1b[31mred\x1b[0m", "tab\tseparated",
        "//a line that starts with a slash", "ＦＵＬＬＷＩＤＴＨ",
    ]  # fmt: skip
    bad = ["bad bytes \udcff\udcfe", "", "   ", "\t", "word " * 700]
    lines = made_up + edges + commands + messages + bad
    rng.shuffle(lines)
    return lines


def _words(rng: random.Random, n: int) -> str:
    pool = ["the", "dragon", "Ünïcödé", "中文", "x", "42", "?", "naïve", "日本", "über", "ok"]
    return " ".join(rng.choice(pool) for _ in range(n))


def test_a_corpus_of_typed_lines_ends_in_answers_refusals_or_saved_replies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = typed_corpus(tmp_path)
    outcomes: list[tuple[str, str]] = []  # (line, outcome)
    settings = SamplingSettings(temperature=0.0, max_tokens=2)
    params = LoadParams(str(default_model_path()), n_ctx=512, n_threads=1)  # as SHORT
    with open_engine() as engine, ChatStore() as store:
        engine.call(engine.worker.load_model(params))
        chat = TerminalChat(engine, store, settings, None, Vision(False, "SmolLM2"), print)
        for line in lines:
            before = _saved_user_messages(store)
            assert chat.handle(line) is True, line  # only /exit and /quit end the session
            said = capsys.readouterr().err
            outcomes.append((line, _outcome(said, _saved_user_messages(store) - before)))
    counts = Counter(outcome for _line, outcome in outcomes)
    print(f"{len(lines)} typed lines: {dict(counts)}", file=sys.stderr)
    assert set(counts) <= set(OUTCOMES), outcomes
    assert counts["not a command"] >= 30 and counts["saved with its reply"] >= 10
    refused = [line for line, outcome in outcomes if outcome == "refused"]
    assert "word " * 700 in refused and "bad bytes \udcff\udcfe" in refused
    with ChatStore() as store:  # what the window reads: replies whole, no slash word kept
        saved = [m for c in store.conversations() for m in store.messages(c.id)]
    assert all(m.complete for m in saved)
    sent = {m.content for m in saved if m.role == "user"}
    assert {text for text in sent if text.lstrip().startswith("/")} == {
        "/a line that starts with a slash"  # sent by "//"; no slash word reached the model
    }


def _saved_user_messages(store: ChatStore) -> int:
    return sum(
        1 for c in store.conversations() for m in store.messages(c.id, False) if m.role == "user"
    )


def _outcome(said: str, saved: int) -> str:
    """What one line came to, from what the chat said and what it saved."""
    if saved == 1:
        return "saved with its reply"
    if "is not a command" in said:
        return "not a command"
    if said.startswith("error: ") or "cannot see images" in said:
        return "refused"
    return "answered" if said.strip() else "ignored"
