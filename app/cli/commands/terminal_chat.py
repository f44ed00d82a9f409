"""The interactive terminal chat: a saved conversation, and the slash commands that steer it.

Why saved: the terminal chat and the window keep one history (app.stores.chat_store), so
a conversation held here is listed and opened by the window and by `shardchat chats`.
It is written as it happens, as the window writes it: the user's message before the
model sees it, the reply as it streams (every SAVE_INTERVAL_S) and whole when it ends,
so Ctrl-C, Ctrl-D, a closed terminal or a killed process loses at most the reply's last
half second. A conversation is made at its first message, so a session that only looked
leaves no empty chat behind.

Why Ctrl-C means one thing at a time: at the prompt it ends the session, while a reply
streams it stops the reply, and in between (a reply just ending, its last save) it is let
go. A Ctrl-C meant for a reply that ended a moment before then neither cuts the reply's
last save short nor ends the session with a KeyboardInterrupt.

Why slash commands are answered here: a word like /help sent to the model as a message
gets a made-up answer and stays in the conversation. Any line starting with "/" is a
command; "//" sends a message that starts with "/".
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from app.engine_host.events import EngineEvent, ReplyFinished
from app.engine_host.worker import EngineWorker
from app.stop_signals import on_ctrl_c
from app.stores.chat_store import ChatStore
from engine.errors import BadInputError, ShardChatError
from engine.generation.sampling import SamplingSettings
from engine.model.image_input import ImageFile, image_file

SAVE_INTERVAL_S = 0.5  # as the window: a killed chat loses at most this much of a reply
NEW_TITLE = "New chat"  # the window's title for a chat not yet named by its first message
TITLE_CHARS = 40

COMMANDS = (
    ("/help", "list these commands"),
    ("/new", "start a new conversation; the one before stays saved (/reset does the same)"),
    ("/system TEXT", "set this conversation's system prompt (/system alone shows it, "
                     "/system off removes it)"),
    ("/image PATH", "attach an image to your next message (a model with vision)"),
    ("/exit", "leave (also /quit or Ctrl-D); everything said is saved"),
    ("//TEXT", "send a message that starts with /"),
)  # fmt: skip
GREETING = (
    "Type a message and press Enter; /help lists the commands, /exit (or Ctrl-D) quits. "
    "The conversation is saved as it goes (the window's chat list shows it)."
)


class ChatEngine(Protocol):
    """What the terminal chat needs of `shardchat chat`'s engine (chat_command's _Engine)."""

    worker: EngineWorker
    thinking: bool | None  # --think / --no-think

    def call(
        self, request_id: int, on_token: Callable[[str, str], None] | None = None
    ) -> EngineEvent: ...


@dataclass(frozen=True)
class Vision:
    """Whether the loaded model sees images, and why not when it does not."""

    sees_images: bool
    model_name: str
    problem: str | None = None

    def refusal(self) -> str:
        name = self.model_name or "this model"
        if self.problem:
            return f"{name} cannot see images here: {self.problem}"
        return (
            f"{name} cannot see images: it has no vision projector. Put the projector (mmproj "
            "GGUF) made for it beside the model, or pair it in the window's Tools → Models"
        )


class TerminalChat:
    """One interactive session: reads lines, answers commands, sends and saves messages."""

    def __init__(
        self,
        engine: ChatEngine,
        store: ChatStore,
        settings: SamplingSettings,
        system: str | None,
        vision: Vision,
        on_reply: Callable[[ReplyFinished], None],
        on_conversation: Callable[[int], None] | None = None,
    ) -> None:
        """`on_conversation`: told the id of each conversation this session makes or opens
        (the supervisor of a chat on lent computers goes on with it after a crash)."""
        self.engine, self.store, self.settings = engine, store, settings
        self.on_conversation = on_conversation
        self.default_system = system or ""  # --system: every new conversation starts with it
        self.system = self.default_system
        self.vision = vision
        self.on_reply = on_reply  # prints the reply's statistics
        self.conversation_id: int | None = None  # made at the first message
        self.images: list[ImageFile] = []  # attached with /image, sent with the next message
        self._commands: dict[str, Callable[[str], bool]] = {
            "/help": self._help,
            "/new": self._new,
            "/reset": self._new,
            "/system": self._system,
            "/image": self._image,
            "/exit": lambda _rest: False,
            "/quit": lambda _rest: False,
        }

    def resume(self, conversation_id: int) -> None:
        """Go on with a saved conversation: the model hears it again, as when the window
        opens it. BadInputError when there is no such conversation."""
        conversation = self.store.conversation(conversation_id)  # unknown: BadInputError
        self.conversation_id, self.system = conversation_id, conversation.system_prompt
        history = self.store.history(conversation_id)
        self.engine.call(self.engine.worker.start_conversation(None, history))
        say(f'(continuing "{conversation.title}", {len(history)} messages)')
        if self.on_conversation is not None:
            self.on_conversation(conversation_id)

    def run(self, read_line: Callable[[], str | None]) -> None:
        """Until /exit, /quit or the end of input (Ctrl-D, Ctrl-C at the prompt)."""
        say(GREETING)
        with on_ctrl_c(lambda _signum, _frame: None):  # between turns: see the module's doc
            while (line := read_line()) is not None and self.handle(line):
                pass
        self._say_where_saved()

    def handle(self, line: str) -> bool:
        """One line typed: a command answered, a message sent and saved, or a one-line
        refusal; False when it ends the session."""
        try:
            return self._handle(line)
        except ShardChatError as exc:  # one bad line does not end the session
            say(f"error: {exc}")
            return True

    def _handle(self, line: str) -> bool:
        text = line.strip()
        if text.startswith("//"):
            return self._send(line.lstrip()[1:])
        if text.startswith("/"):
            word, _space, rest = text.partition(" ")
            command = self._commands.get(word.lower())
            if command is None:
                say(f"{word} is not a command; /help lists them (// sends a line starting with /)")
                return True
            return command(rest.strip())
        return self._send(line) if text else True

    # --- commands ---

    def _help(self, _rest: str) -> bool:
        width = max(len(name) for name, _ in COMMANDS) + 2
        for name, what in COMMANDS:
            say(f"  {name:{width}}{what}")
        return True

    def _new(self, _rest: str) -> bool:
        self._say_where_saved()
        self.conversation_id, self.system, self.images = None, self.default_system, []
        self.engine.call(self.engine.worker.start_conversation(self.system or None))
        say("(new conversation)")
        return True

    def _system(self, rest: str) -> bool:
        if not rest:
            say(f"system prompt: {self.system}" if self.system else "(no system prompt)")
            return True
        self.system = "" if rest.lower() == "off" else _utf8(rest)
        if self.conversation_id is None:
            self.engine.call(self.engine.worker.start_conversation(self.system or None))
        else:  # the model hears the conversation again under the new prompt, as in the window
            self.store.set_system_prompt(self.conversation_id, self.system)
            history = self.store.history(self.conversation_id)
            self.engine.call(self.engine.worker.start_conversation(None, history))
        say("(system prompt set)" if self.system else "(system prompt removed)")
        return True

    def _image(self, rest: str) -> bool:
        if not self.vision.sees_images:
            say(self.vision.refusal())
            return True
        if not rest:
            say("/image needs the path of an image file")
            return True
        try:
            image = image_file(Path(_unquoted(rest)).expanduser())
        except BadInputError as exc:
            say(str(exc))
            return True
        self.images.append(image)
        say(f"({image.name} goes with your next message)")
        return True

    # --- messages ---

    def _send(self, text: str) -> bool:
        if not text.strip():
            return True
        _utf8(text)  # before a conversation is made for it
        conversation_id = self._conversation()
        images, self.images = self.images, []
        asked = self.store.add_message(conversation_id, "user", text, images=images)
        self._retitle(conversation_id, text)
        placeholder = self.store.add_message(conversation_id, "assistant", "", complete=False)
        assert placeholder.message_id is not None
        reply = _SavedReply(self.store, placeholder.message_id)
        try:
            request = self.engine.worker.send_message(
                text, self.settings, images, thinking=self.engine.thinking
            )
            finished = self.engine.call(request, reply.add)
        except ShardChatError:
            reply.failed(asked.message_id)
            self._forget_if_empty(conversation_id)
            raise
        sys.stdout.write("\n")
        if isinstance(finished, ReplyFinished):
            reply.finished(finished)
            self.on_reply(finished)
        return True

    def _conversation(self) -> int:
        """The open conversation, made now if this is its first message."""
        if self.conversation_id is None:
            change = self.store.create_conversation(NEW_TITLE, self.system)
            self.conversation_id = change.conversation_id
            if self.on_conversation is not None:
                self.on_conversation(self.conversation_id)
        return self.conversation_id

    def _retitle(self, conversation_id: int, first_message: str) -> None:
        """A new conversation is named by its first message, as the window names it."""
        if self.store.conversation(conversation_id).title == NEW_TITLE:
            title = " ".join(first_message.split())[:TITLE_CHARS]
            if title:
                self.store.rename(conversation_id, title)

    def _forget_if_empty(self, conversation_id: int) -> None:
        """A conversation whose only message was refused is not kept."""
        if not self.store.messages(conversation_id, with_images=False):
            self.store.delete(conversation_id)
            self.conversation_id = None

    def _say_where_saved(self) -> None:
        if self.conversation_id is not None:
            title = self.store.conversation(self.conversation_id).title
            say(f"(saved as conversation {self.conversation_id}, “{title}”)")


class _SavedReply:
    """A reply saved as it streams: its text every SAVE_INTERVAL_S, then whole."""

    def __init__(self, store: ChatStore, message_id: int) -> None:
        self.store, self.message_id = store, message_id
        self.text, self.thinking = "", ""
        self._saved_at = time.monotonic()

    def add(self, text: str, thinking: str) -> None:
        self.text += text
        self.thinking += thinking
        if time.monotonic() - self._saved_at > SAVE_INTERVAL_S:
            self.store.update_message(self.message_id, self.text, False, None, self.thinking)
            self._saved_at = time.monotonic()

    def finished(self, reply: ReplyFinished) -> None:
        self.store.update_message(
            self.message_id, reply.text, True, reply.stats.to_dict(), reply.thinking
        )

    def failed(self, asked_id: int | None) -> None:
        """A refused message (too long, a bad image) never reached the model's history:
        it leaves the saved one too. A reply that failed midway keeps what it said."""
        if self.text or self.thinking:
            self.store.update_message(self.message_id, self.text, True, None, self.thinking)
            return
        self.store.delete_message(self.message_id)
        if asked_id is not None:
            self.store.delete_message(asked_id)


def _utf8(typed: str) -> str:
    """What was typed, refused where the terminal sent bytes that are not UTF-8 (Python
    keeps them as lone surrogates, which neither the model nor the history can take)."""
    try:
        typed.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInputError(
            "what was typed is not UTF-8 text; set the terminal to UTF-8 and type it again"
        ) from None
    return typed


def _unquoted(path: str) -> str:
    """A path as a terminal pastes a dropped file: maybe in quotes."""
    if len(path) >= 2 and path[0] == path[-1] and path[0] in "'\"":
        return path[1:-1]
    return path


def say(line: str) -> None:
    """The chat's own words go to stderr, so stdout carries only the model's replies."""
    print(line, file=sys.stderr)


def read_line() -> str | None:
    """The next line typed, or None at the end of input (Ctrl-D) or Ctrl-C at the prompt."""
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401 - line editing and history for input()
    try:
        with on_ctrl_c(signal.default_int_handler):  # raises KeyboardInterrupt in input()
            return input("\n> ")
    except (EOFError, KeyboardInterrupt):
        print(file=sys.stderr)
        return None
