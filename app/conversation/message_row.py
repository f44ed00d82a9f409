"""One message as the chat view shows it, apart from Qt so the chat state can build rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.conversation.chat_export import speaker


@dataclass(frozen=True)
class MessageRow:
    """One shown message. `message_id` is the chat store's id (None before it is saved)."""

    message_id: int | None
    role: str
    text: str
    thinking: str = ""
    image_names: tuple[str, ...] = ()
    stats: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    streaming: bool = False
    version: int = 0

    @property
    def speaker(self) -> str:
        return speaker(self.role)

    def as_markdown(self) -> str:
        """The message as a person would paste it: who spoke, then what was said."""
        images = "".join(f"*[image: {name}]*\n\n" for name in self.image_names)
        return f"**{self.speaker}**\n\n{images}{self.text}"
