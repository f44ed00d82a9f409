"""The chat history's values, and the checks what is saved passes first (BadInputError if not)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import BadInputError
from engine.generation.stats import GenerationStats
from engine.model.image_input import ImageFile

log = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant")
FTS_MIN_QUERY_CHARS = 3  # the trigram index cannot match anything shorter


# -- values ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """What one mutating call changed; `kind` is one of the module's change-kind constants."""

    kind: str
    conversation_id: int
    message_id: int | None = None


@dataclass(frozen=True)
class Conversation:
    """One conversation's own fields (its messages are read separately, they may be many)."""

    id: int
    title: str
    system_prompt: str
    settings: dict[str, Any] = field(hash=False)
    created_at: str  # UTC, ISO 8601 with microseconds
    updated_at: str  # UTC, ISO 8601 with microseconds; bumped by every change to it


@dataclass(frozen=True)
class StoredMessage:
    """One saved message; `complete` is False while its reply is still being generated."""

    id: int
    conversation_id: int
    position: int  # increasing within a conversation, from 0
    role: str
    content: str
    stats: dict[str, Any] | None = field(hash=False)
    complete: bool
    created_at: str
    images: tuple[ImageFile, ...] = field(default=(), repr=False)
    thinking: str = ""  # a reasoning model's thinking, apart from the answer in content
    image_names: tuple[str, ...] = ()  # its images' names, in order, even when not read


# -- checking and encoding ---------------------------------------------------------------------


def check_id(value: object, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadInputError(f"a {what} id must be a whole number, not {value!r}")


def no_conversation(conversation_id: int) -> BadInputError:
    return BadInputError(f"no conversation with id {conversation_id}")


def check_text(value: object, what: str) -> str:
    """The text itself, refused if it is not a str SQLite can store (UTF-8 encodable)."""
    if not isinstance(value, str):
        raise BadInputError(f"the {what} must be text, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadInputError(f"the {what} is not valid Unicode text: {exc.reason}") from exc
    return value


def check_title(title: object) -> str:
    """A title on one line: whitespace runs become one space; an empty title is refused."""
    clean = " ".join(check_text(title, "title").split())
    if not clean:
        raise BadInputError("a conversation title cannot be empty")
    return clean


def check_role(role: object, complete: object) -> None:
    if role not in ROLES:
        raise BadInputError(f"a message role must be one of {', '.join(ROLES)}, not {role!r}")
    if not isinstance(complete, bool):
        raise BadInputError(f"complete must be True or False, not {complete!r}")
    if not complete and role != "assistant":
        raise BadInputError(f"only an assistant reply can be incomplete, not a {role} message")


def encode_settings(settings: object) -> str:
    if not isinstance(settings, Mapping):
        raise BadInputError(f"settings must be a dict, not {type(settings).__name__}")
    return _to_json(dict(settings), "settings")


def encode_stats(stats: object) -> str | None:
    if stats is None:
        return None
    if isinstance(stats, GenerationStats):
        return _to_json(stats.to_dict(), "stats")
    if not isinstance(stats, Mapping):
        raise BadInputError(f"stats must be GenerationStats or a dict, not {type(stats).__name__}")
    return _to_json(dict(stats), "stats")


def _to_json(data: dict[str, Any], what: str) -> str:
    try:
        return json.dumps(data, ensure_ascii=False, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise BadInputError(f"the {what} cannot be saved as JSON: {exc}") from exc


# -- reading rows back -------------------------------------------------------------------------


def conversation_from_row(path: Path, row: tuple[Any, ...]) -> Conversation:
    row_id, title, system_prompt, settings_json, created_at, updated_at = row
    settings = _decode(path, settings_json, f"settings of conversation {row_id}")
    return Conversation(
        row_id,
        title,
        system_prompt,
        settings if isinstance(settings, dict) else {},
        created_at,
        updated_at,
    )


def message_from_row(
    path: Path,
    row: tuple[Any, ...],
    images: tuple[ImageFile, ...] = (),
    image_names: tuple[str, ...] = (),
) -> StoredMessage:
    row_id, conversation_id, position, role, content, stats_json, complete, created_at = row[:8]
    thinking = row[8] or ""
    stats = None
    if stats_json is not None:
        decoded = _decode(path, stats_json, f"stats of message {row_id}")
        stats = decoded if isinstance(decoded, dict) else None
    return StoredMessage(
        row_id, conversation_id, position, role, content, stats, bool(complete), created_at,
        images, thinking, image_names,
    )  # fmt: skip


def _decode(path: Path, text: str, what: str) -> object:
    """Parse JSON we wrote; a row edited by hand is logged and read as empty, not fatal."""
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        log.warning("ignoring unreadable %s in %s: %s", what, path, exc)
        return None
