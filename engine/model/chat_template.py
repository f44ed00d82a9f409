"""Turning a list of chat messages into the prompt text the model was trained on.

A model that ships `tokenizer.chat_template` gets it, rendered as Hugging Face
does (Jinja2, in llama-cpp-python's ImmutableSandboxedEnvironment: a template
cannot reach Python's internals, so a hostile GGUF cannot run code). Without
one, or with one that fails a trial render, engine.model.prompt_format picks
the format its vocabulary's special tokens belong to, else plain completion
(a base model always gets plain completion: engine.model.model_purpose); the
user may choose another per model.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from engine.errors import BadInputError
from engine.model.chat_message import ChatMessage
from engine.model.model_purpose import ModelPurpose
from engine.model.prompt_format import (
    AUTO,
    COMPLETION_STOP,
    FormatKind,
    PromptFormat,
    builtin_stop,
    choose_format,
    render_builtin,
    render_completion,
)

log = logging.getLogger(__name__)

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# What a template may raise while rendering: its own raise_exception (ValueError), the
# sandbox refusing an attribute (jinja2.SecurityError), or plain mistakes in it.
_TEMPLATE_ERRORS = (jinja2.TemplateError, ValueError, TypeError, LookupError, AttributeError)
_TRIAL: list[Any] = [{"role": "user", "content": "Hello"}]


@dataclass(frozen=True)
class RenderedPrompt:
    """Prompt text plus what the template says about stopping and special tokens."""

    text: str
    stop: tuple[str, ...]
    template_adds_bos: bool


class ChatTemplate:
    """A model's prompt format (`format`: which, and why), ready to render message lists.

    `template`: the GGUF's own chat template, if any; `special_tokens`: which of
    prompt_format.FAMILY_MARKERS the vocabulary has as special tokens; `requested`:
    the per-model setting (auto, template, completion or a llama.cpp built-in name).
    """

    def __init__(
        self,
        template: str | None,
        bos_token: str,
        eos_token: str,
        *,
        special_tokens: frozenset[str] = frozenset(),
        requested: str = AUTO,
        purpose: ModelPurpose | None = None,
    ) -> None:
        self.source = template or None  # the GGUF's template text (None: it has none)
        self.special_tokens = special_tokens
        self.purpose = purpose  # what the file says the model was trained for (None: unknown)
        self._bos_token, self._eos_token = bos_token, eos_token
        self._formatter, problem = self._sandboxed(self.source)
        self.format: PromptFormat = choose_format(
            self.source is not None, special_tokens, requested, problem, purpose
        )
        if problem and self.format.kind is not FormatKind.TEMPLATE:
            log.warning("the model's chat template is not used: %s", problem)

    @property
    def is_fallback(self) -> bool:
        """The model's own template is not what renders."""
        return self.format.kind is not FormatKind.TEMPLATE

    @property
    def has_thinking_switch(self) -> bool:
        """The template in use reads `enable_thinking` (Qwen3's do), so render() can pass it."""
        return not self.is_fallback and "enable_thinking" in (self.source or "")

    def with_format(self, requested: str) -> ChatTemplate:
        """The same model's template under another prompt-format setting."""
        return ChatTemplate(
            self.source, self._bos_token, self._eos_token,
            special_tokens=self.special_tokens, requested=requested, purpose=self.purpose,
        )  # fmt: skip

    def render(
        self, messages: Sequence[ChatMessage], *, enable_thinking: bool | None = None
    ) -> RenderedPrompt:
        """Render messages with the generation prompt for the assistant's next turn.

        `enable_thinking` goes into the template's context when not None (only a
        template with `has_thinking_switch` reads it)."""
        # plain role/content dicts: what the formatter's TypedDict union describes, by role
        return self.render_dicts([m.to_dict() for m in messages], enable_thinking=enable_thinking)

    def render_dicts(
        self,
        plain: Sequence[dict[str, Any]],
        *,
        enable_thinking: bool | None = None,
        tools: Sequence[dict[str, Any]] = (),
    ) -> RenderedPrompt:
        """Render messages as OpenAI clients send them (tool calls, tool results) with the
        generation prompt; `tools` reach a template that renders them (only the model's own
        template can: built-in formats and plain completion ignore them)."""
        kind = self.format.kind
        if kind is FormatKind.TEMPLATE:
            text, stop = self._render_template(list(plain), enable_thinking, list(tools))
        elif kind is FormatKind.BUILTIN:
            text = render_builtin(self.format.name, plain)
            stop = builtin_stop(self.format.name, self._eos_token)
        else:
            text, stop = render_completion(plain), COMPLETION_STOP
        adds_bos = bool(self._bos_token) and text.startswith(self._bos_token)
        return RenderedPrompt(text=text, stop=stop, template_adds_bos=adds_bos)

    def _render_template(
        self, plain: list[Any], enable_thinking: bool | None, tools: list[Any]
    ) -> tuple[str, tuple[str, ...]]:
        assert self._formatter is not None  # the format is TEMPLATE only when it compiled
        extra: dict[str, Any] = {}
        if enable_thinking is not None:
            extra["enable_thinking"] = enable_thinking
        if tools:
            extra["tools"] = tools
        try:
            response = self._formatter(messages=plain, **extra)
        except _TEMPLATE_ERRORS as exc:
            raise BadInputError(
                f"the model's chat template refused this conversation ({_one_line(exc)}); "
                "choose another prompt format for the model"
            ) from exc
        stop = response.stop if isinstance(response.stop, list) else [response.stop]
        return response.prompt, tuple(s for s in stop if s)

    def _sandboxed(self, template: str | None) -> tuple[Jinja2ChatFormatter | None, str | None]:
        """The template compiled in the sandbox and tried on one user message, or why not."""
        if template is None:
            return None, None
        try:
            formatter = Jinja2ChatFormatter(
                template=template, eos_token=self._eos_token, bos_token=self._bos_token
            )
            formatter(messages=_TRIAL)
        except _TEMPLATE_ERRORS as exc:
            return None, f"{type(exc).__name__}: {_one_line(exc)}"
        return formatter, None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] + ("..." if len(text) > 200 else "")
