"""One turn of a conversation, apart from how a template renders it: stores, exports and
summaries keep turns without importing llama.cpp's template code."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.model.image_input import ImageFile

# mtmd's default media marker: where an image's tokens go in the rendered prompt
MEDIA_MARKER = "<__media__>"


@dataclass(frozen=True)
class ChatMessage:
    """One turn of a conversation; role is system, user or assistant.

    A user turn may carry images; they render as media markers before the text,
    which the vision runtime replaces with the images' embeddings.
    """

    role: str
    content: str
    images: tuple[ImageFile, ...] = field(default=(), repr=False)
    thinking: str = ""  # an assistant turn's reasoning, rendered as reasoning_content

    def to_dict(self) -> dict[str, str]:
        markers = "".join(f"{MEDIA_MARKER}\n" for _ in self.images)
        reasoning = {"reasoning_content": self.thinking} if self.thinking else {}
        return {"role": self.role, "content": markers + self.content, **reasoning}
