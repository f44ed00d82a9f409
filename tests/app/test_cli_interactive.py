"""`shardchat chat` on a terminal: an interactive session driven through a pseudo-terminal."""

from __future__ import annotations

import time

from tests.app.pty_terminal import Terminal


def test_interactive_session_chats_resets_and_exits() -> None:
    with Terminal("chat", "--temperature", "0", "--max-tokens", "12") as term:
        term.expect("/exit")
        term.expect("> ")
        term.type("What is the capital of France?\n")
        reply = term.expect("tokens/s")
        assert reply.strip()
        term.expect("> ")
        term.type("/reset\n")
        term.expect("(new conversation)")
        term.type("/exit\n")
        assert term.exit_code() == 0


def test_ctrl_c_stops_the_reply_but_not_the_session() -> None:
    with Terminal("chat", "--temperature", "0", "--max-tokens", "2000") as term:
        term.expect("> ")
        term.type("Write a very long story about a dragon.\n")
        time.sleep(1.0)
        term.type("\x03")  # Ctrl-C while the reply streams
        stats = term.expect("]")
        assert "cancelled" in stats
        term.expect("> ")
        term.type("\x04")  # Ctrl-D at the prompt ends the session
        assert term.exit_code() == 0


def test_an_overlong_message_is_reported_and_the_session_goes_on() -> None:
    with Terminal("chat", "--ctx", "256", "--temperature", "0", "--max-tokens", "4") as term:
        term.expect("> ")
        term.type("word " * 400 + "\n")
        term.expect("too long for the context window")
        term.expect("> ")
        term.type("Hi\n")
        term.expect("tokens/s")
        term.type("/exit\n")
        assert term.exit_code() == 0
