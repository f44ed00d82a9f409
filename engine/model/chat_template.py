"""Turning a list of chat messages into the prompt text the model was trained on.

We render the GGUF's own `tokenizer.chat_template` (Jinja2, as Hugging Face
does) so every model speaks its own format; a model that ships no template
gets ChatML, the most common one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llama_cpp.llama_chat_format import Jinja2ChatFormatter

if TYPE_CHECKING:
    from engine.model.image_input import ImageFile

# mtmd's default media marker: where an image's tokens go in the rendered prompt
MEDIA_MARKER = "<__media__>"

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


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


@dataclass(frozen=True)
class RenderedPrompt:
    """Prompt text plus what the template says about stopping and special tokens."""

    text: str
    stop: tuple[str, ...]
    template_adds_bos: bool


class ChatTemplate:
    """A model's chat template, ready to render message lists."""

    def __init__(self, template: str | None, bos_token: str, eos_token: str) -> None:
        self.source = template or CHATML_TEMPLATE
        self.is_fallback = template is None
        self._bos_token = bos_token
        self._formatter = Jinja2ChatFormatter(
            template=self.source, eos_token=eos_token, bos_token=bos_token
        )

    @property
    def has_thinking_switch(self) -> bool:
        """The template reads `enable_thinking` (Qwen3's think / don't think switch)."""
        return "enable_thinking" in self.source

    def render(
        self, messages: Sequence[ChatMessage], *, enable_thinking: bool | None = None
    ) -> RenderedPrompt:
        """Render messages with the generation prompt for the assistant's next turn."""
        # plain role/content dicts: what the formatter's TypedDict union describes, by role
        plain: list[Any] = [m.to_dict() for m in messages]
        switch: dict[str, Any] = (
            {} if enable_thinking is None else {"enable_thinking": enable_thinking}
        )
        response = self._formatter(messages=plain, **switch)
        stop = response.stop if isinstance(response.stop, list) else [response.stop]
        adds_bos = bool(self._bos_token) and response.prompt.startswith(self._bos_token)
        return RenderedPrompt(
            text=response.prompt,
            stop=tuple(s for s in stop if s),
            template_adds_bos=adds_bos,
        )
