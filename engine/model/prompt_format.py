"""Which prompt format a model gets, and why: its own template, its vocabulary's family, or none.

A GGUF's `tokenizer.chat_template` wins when it has one. Without it llama.cpp
falls back to ChatML (its detection reads template text, never the
vocabulary), so a Gemma file that lost its template answers with literal
``<|im_start|>`` text. We look at the vocabulary instead: a model trained on a
chat format has that format's turn markers as special tokens, and llama.cpp
ships the format itself as a named built-in template. A vocabulary with no
family's markers gets plain text completion (`COMPLETION_STOP` shows its shape),
and so does a base model (engine.model.model_purpose): pretrained only, it has
never seen the chat format its vocabulary's markers belong to.

Every choice carries a one-line reason, for `shardchat info`, `chat --verbose`
and the model manager. A per-model setting (`choose_format`'s `requested`)
overrides the automatic choice.
"""

from __future__ import annotations

import ctypes
import enum
import functools
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp

from engine.errors import BadInputError
from engine.model.model_purpose import ModelPurpose, Purpose

AUTO = "auto"  # the rule above
TEMPLATE = "template"  # the GGUF's own template (only when it has one)
COMPLETION = "completion"  # plain text completion


class FormatKind(enum.Enum):
    TEMPLATE = "template"  # the GGUF's Jinja template, rendered sandboxed
    BUILTIN = "builtin"  # one of llama.cpp's named templates
    COMPLETION = "completion"  # a plain transcript the model continues


@dataclass(frozen=True)
class PromptFormat:
    """The chosen format: its name (a setting value), its kind and why it was chosen."""

    name: str
    kind: FormatKind
    reason: str

    def describe(self) -> str:
        """One line for people: "gemma (no chat template; the vocabulary has ...)"."""
        return f"{self.name} ({self.reason})"


@dataclass(frozen=True)
class VocabularyFamily:
    """A chat format recognised by its turn markers, all special tokens of the vocabulary."""

    label: str  # for people: "Gemma"
    builtin: str  # llama.cpp's built-in template name
    markers: tuple[str, ...]  # every one must be a special token
    stop: tuple[str, ...]  # what ends the assistant's turn, as text


# Most specific first: a vocabulary carrying several families' markers gets the first match
# (Phi-4 writes ChatML's markers plus <|im_sep|>; GLM-4 Phi-3's <|user|> plus [gMASK]).
VOCABULARY_FAMILIES: tuple[VocabularyFamily, ...] = (
    VocabularyFamily("Llama 4", "llama4", ("<|header_start|>", "<|header_end|>", "<|eot|>"),
                     ("<|eot|>",)),
    VocabularyFamily("Llama 3", "llama3",
                     ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"), ("<|eot_id|>",)),
    VocabularyFamily("Gemma", "gemma", ("<start_of_turn>", "<end_of_turn>"), ("<end_of_turn>",)),
    VocabularyFamily("Command-R", "command-r",
                     ("<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|CHATBOT_TOKEN|>"),
                     ("<|END_OF_TURN_TOKEN|>",)),
    VocabularyFamily("Granite", "granite", ("<|start_of_role|>", "<|end_of_role|>"),
                     ("<|end_of_text|>",)),
    VocabularyFamily("DeepSeek V3", "deepseek3", ("<｜User｜>", "<｜Assistant｜>"),
                     ("<｜end▁of▁sentence｜>",)),
    VocabularyFamily("Mistral v7", "mistral-v7",
                     ("[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[INST]", "[/INST]"), ("</s>",)),
    VocabularyFamily("Mistral", "mistral-v3", ("[INST]", "[/INST]"), ("</s>",)),
    VocabularyFamily("Phi-4", "phi4", ("<|im_start|>", "<|im_sep|>", "<|im_end|>"),
                     ("<|im_end|>",)),
    VocabularyFamily("GLM-4", "chatglm4", ("[gMASK]", "<sop>", "<|user|>", "<|assistant|>"),
                     ("<|user|>", "<|observation|>")),
    VocabularyFamily("Phi-3", "phi3", ("<|user|>", "<|assistant|>", "<|end|>"), ("<|end|>",)),
    VocabularyFamily("EXAONE", "exaone3", ("[|user|]", "[|assistant|]", "[|endofturn|]"),
                     ("[|endofturn|]",)),
    VocabularyFamily("ChatML", "chatml", ("<|im_start|>", "<|im_end|>"), ("<|im_end|>",)),
)  # fmt: skip

# Every marker a vocabulary is asked about (the loaded model checks just these texts).
FAMILY_MARKERS: tuple[str, ...] = tuple(
    dict.fromkeys(m for family in VOCABULARY_FAMILIES for m in family.markers)
)

# Plain completion renders a transcript the model continues:
#
#     {system text}\n\n            (only when there is a system message)
#     User: {text}\n\n
#     Assistant: {text}\n\n
#     ...
#     User: {text}\n\n
#     Assistant:
#
# and stops where the model starts writing the user's next turn.
COMPLETION_ROLES = {"user": "User", "assistant": "Assistant"}
COMPLETION_STOP = ("\nUser:",)


@functools.cache
def builtin_template_names() -> tuple[str, ...]:
    """llama.cpp's named chat templates (`llama_chat_builtin_templates`), sorted."""
    count = llama_cpp.llama_chat_builtin_templates(None, 0)
    names = (ctypes.c_char_p * count)()
    llama_cpp.llama_chat_builtin_templates(names, count)
    return tuple(sorted(name.decode() for name in names if name))


def format_choices(has_template: bool = True) -> tuple[str, ...]:
    """Every value `requested` may take: auto, template (a GGUF with one), completion, built-ins."""
    own = (TEMPLATE,) if has_template else ()
    return (AUTO, *own, COMPLETION, *builtin_template_names())


def check_format_name(name: str) -> str:
    """The name if it is a prompt format at all (arguments, settings); else BadInputError."""
    if name not in format_choices():
        raise BadInputError(
            f"unknown prompt format {name!r}; choose {AUTO}, {TEMPLATE}, {COMPLETION} or one of "
            f"llama.cpp's built-in formats: {', '.join(builtin_template_names())}"
        )
    return name


def family_of(special_tokens: frozenset[str]) -> VocabularyFamily | None:
    """The first family whose markers are all special tokens of the vocabulary."""
    for family in VOCABULARY_FAMILIES:
        if special_tokens.issuperset(family.markers):
            return family
    return None


def family_named(builtin: str) -> VocabularyFamily | None:
    return next((f for f in VOCABULARY_FAMILIES if f.builtin == builtin), None)


def choose_format(
    has_template: bool,
    special_tokens: frozenset[str],
    requested: str = AUTO,
    template_problem: str | None = None,
    purpose: ModelPurpose | None = None,
) -> PromptFormat:
    """The format for a model: `requested` when it is not auto, else the rule of this module.

    `template_problem`: why the GGUF's template cannot be used (it broke out of the
    sandbox or failed to render); auto then falls back to the vocabulary, an explicit
    request for the template is refused. `purpose`: what the file says the model was
    trained for (None: not known, as a chat model).
    """
    check_format_name(requested)
    if requested == AUTO:
        return _automatic(has_template, special_tokens, template_problem, purpose)
    if requested == TEMPLATE:
        if not has_template:
            raise BadInputError(
                "prompt format 'template': the model has no chat template of its own; choose "
                f"one of {', '.join(format_choices(has_template=False))}"
            )
        if template_problem:
            raise BadInputError(f"prompt format 'template': {template_problem}")
        return PromptFormat(TEMPLATE, FormatKind.TEMPLATE, "the model's own chat template, as set")
    if requested == COMPLETION:
        return PromptFormat(COMPLETION, FormatKind.COMPLETION, "plain text completion, as set")
    return PromptFormat(
        requested, FormatKind.BUILTIN, f"llama.cpp's built-in {requested!r}, as set"
    )


def _automatic(
    has_template: bool,
    special_tokens: frozenset[str],
    template_problem: str | None,
    purpose: ModelPurpose | None,
) -> PromptFormat:
    if has_template and not template_problem:
        return PromptFormat(TEMPLATE, FormatKind.TEMPLATE, "the model's own chat template")
    why = (
        f"its chat template is unusable ({template_problem})"
        if has_template
        else "no chat template"
    )
    if purpose is not None and purpose.is_base:
        return PromptFormat(
            COMPLETION, FormatKind.COMPLETION,
            f"{why}, and a base model ({purpose.evidence}): plain text completion",
        )  # fmt: skip
    if purpose is not None and purpose.purpose is Purpose.CHAT and not has_template:
        why = f"{why}, a chat model ({purpose.evidence})"
    family = family_of(special_tokens)
    if family is None:
        return PromptFormat(
            COMPLETION, FormatKind.COMPLETION,
            f"{why} and no chat format's markers in the vocabulary: plain text completion",
        )  # fmt: skip
    return PromptFormat(
        family.builtin, FormatKind.BUILTIN,
        f"{why}; the vocabulary has {'/'.join(family.markers)}: {family.label}'s format",
    )  # fmt: skip


# ---------------------------------------------------------------- rendering


def render_builtin(name: str, messages: Sequence[dict[str, str]]) -> str:
    """`messages` (role/content dicts) in llama.cpp's built-in template `name`, with the
    assistant's turn opened (`llama_chat_apply_template`)."""
    chat = (llama_cpp.llama_chat_message * len(messages))()
    encoded = [(m["role"].encode(), m["content"].encode()) for m in messages]  # kept alive
    for slot, (role, content) in zip(chat, encoded, strict=True):
        slot.role, slot.content = role, content
    size = 256 + sum(len(role) + len(content) for role, content in encoded) * 2
    for _ in range(2):  # a second pass when the first buffer was too small
        buffer = ctypes.create_string_buffer(size)
        written = llama_cpp.llama_chat_apply_template(
            name.encode(), chat, len(messages), True, buffer, size
        )
        if written < 0:
            raise BadInputError(f"llama.cpp has no built-in chat template {name!r}")
        if written <= size:
            return buffer.raw[:written].decode("utf-8", errors="replace")
        size = written
    raise RuntimeError(f"llama_chat_apply_template({name!r}) kept asking for a larger buffer")


def builtin_stop(name: str, eos_token: str) -> tuple[str, ...]:
    """Stop strings of a built-in format: its family's end of turn, and the model's EOS."""
    family = family_named(name)
    stop = (*(family.stop if family else ()), eos_token)
    return tuple(dict.fromkeys(s for s in stop if s))


def render_completion(messages: Sequence[dict[str, str]]) -> str:
    """The plain transcript of COMPLETION_STOP's comment, ending with "Assistant:"."""
    parts = []
    for message in messages:
        role = COMPLETION_ROLES.get(message["role"])
        parts.append(message["content"] if role is None else f"{role}: {message['content']}")
    return "".join(f"{part}\n\n" for part in parts) + "Assistant:"
