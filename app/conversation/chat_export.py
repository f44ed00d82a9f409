"""A conversation as a Markdown document, to paste somewhere or keep beside other notes.

Why Markdown: the replies are Markdown already (lists, code fences), so the
document reads well as plain text and renders anywhere. Images are named,
not embedded: a document with base64 photos in it is neither pasteable nor
readable, and the originals stay in the chat history.

Two things a saved message can do to the document around it are undone here:
a reply cut short inside a code block leaves the fence open, which would turn
every later message into code, so the fence is closed; and each message's
text is set off by blank lines so it cannot run into the next heading.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

from app.stores.atomic_files import write_text_atomic
from app.stores.chat_records import StoredMessage
from app.stores.chat_store import ChatStore
from engine.errors import BadInputError

# Who spoke, as the chat shows it; ui/ may import this table (app/ cannot import ui/).
SPEAKERS = {"user": "You", "assistant": "Assistant", "system": "System"}

CUT_SHORT = "*(reply cut short)*"
_NAME_SPECIALS = re.compile(r"([\\`*_\[\]<>])")
_HEADING_CLOSING = re.compile(r"(^|\s)(#+)$")
_CONTAINER_PREFIX = re.compile(r"^[\s>]*")


def speaker(role: str) -> str:
    """The name the chat gives a role; an unknown role is shown as itself."""
    return SPEAKERS.get(role, role)


def conversation_markdown(
    store: ChatStore, conversation_id: int, exported_at: datetime | None = None
) -> str:
    """The whole conversation as one Markdown document (images by name only).

    `exported_at` (default: now) is the moment the header names, in UTC.
    An unknown id is bad input (the store's one-line message).
    """
    conversation = store.conversation(conversation_id)
    messages = store.messages(conversation_id, with_images=False)
    when = (exported_at or datetime.now(timezone.utc)).astimezone(timezone.utc)
    count = f"{len(messages)} message" + ("" if len(messages) == 1 else "s")
    parts = [
        f"# {_heading_text(conversation.title)}",
        f"*Exported from ShardChat on {when:%Y-%m-%d %H:%M} (UTC) · {count}*",
    ]
    if conversation.system_prompt.strip():
        parts += ["**System prompt**", _quoted(conversation.system_prompt)]
    for message in messages:
        parts += _message_parts(message)
    return "\n\n".join(parts) + "\n"


def export_conversation(store: ChatStore, conversation_id: int, path: Path) -> Path:
    """Write the conversation's Markdown to `path` whole or not at all; returns the path.

    A folder that does not exist is refused rather than made: a typo in the
    folder should not leave a document somewhere unexpected.
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise BadInputError(f"cannot write {path}: the folder {path.parent} does not exist")
    if path.is_dir():
        raise BadInputError(f"cannot write {path}: it is a folder")
    write_text_atomic(path, conversation_markdown(store, conversation_id))
    return path


def _message_parts(message: StoredMessage) -> list[str]:
    parts = [f"## {speaker(message.role)}"]
    parts += [f"*[image: {_escaped(name)}]*" for name in message.image_names]
    if message.thinking.strip():
        parts += [
            "<details><summary>Thinking</summary>",
            _closed_fences(message.thinking.strip("\n")),
            "</details>",
        ]
    if message.content.strip():
        parts.append(_closed_fences(message.content.strip("\n")))
    if not message.complete:
        parts.append(CUT_SHORT)
    return parts


def _heading_text(title: str) -> str:
    """The title on a heading line; a trailing ' #' would be read as the heading's closing.

    ('C#' is left alone: only '#'s after a space close a heading.)
    """
    closing = _HEADING_CLOSING.search(title)
    if closing is None:
        return title
    return title[: closing.start(2)] + "\\#" * len(closing.group(2))


def _escaped(name: str) -> str:
    """A file name as literal text: a '*' or '_' in it must not start emphasis."""
    return _NAME_SPECIALS.sub(r"\\\1", name)


def _quoted(text: str) -> str:
    return "\n".join(f"> {line}" if line.strip() else ">" for line in text.splitlines())


def _closed_fences(text: str) -> str:
    """The text with a code fence left open at its end closed (a reply cut short mid-code).

    Only a fence at the top level matters: one inside a list or a quote ends with
    its container when the next heading starts.
    """
    from markdown_it import MarkdownIt  # an export only: the chat list opens without it

    tokens = MarkdownIt("commonmark").parse(text)
    fences = [t for t in tokens if t.type == "fence" and t.level == 0 and t.map]
    if not fences:
        return text
    last = fences[-1]
    lines = text.splitlines()
    start, end = last.map or (0, 0)
    if end < len(lines):
        return text
    closing = _CONTAINER_PREFIX.sub("", lines[end - 1]).rstrip() if end - 1 > start else ""
    fence_char = last.markup[0]
    if len(closing) >= len(last.markup) and set(closing) == {fence_char}:
        return text
    return f"{text}\n{last.markup}"
