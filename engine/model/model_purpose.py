"""Whether a model was tuned to chat or only pretrained, judged from what its GGUF says.

A base (pretrained) model has never seen a chat format, even when its
vocabulary holds one's turn markers: Gemma 3 270M's base model shares the
instruction-tuned model's vocabulary, `<start_of_turn>` included, and answers
"The capital of France is" in Gemma's turn format with "devenue paying tax on
the rent paid by the tenants…", but as plain completion with "The French are
the most populous country in Europe…". So engine.model.prompt_format gives a
base model plain completion, and keeps the vocabulary's format for the rest.

The evidence, strongest first; the first that speaks decides:

1. a chat template (`tokenizer.chat_template`, usable or not): a chat model.
   Someone wrote down how to talk to it (Qwen's base models ship one too, and
   answer in it).
2. `general.finetune`, then `general.tags`: what the converter was told about
   the model. A finetune holding a chat word ("it", "Instruct", "chat", "sft",
   "dpo", ...) means chat; one holding a base word ("base", "pt", "pretrained")
   means base. A tag must be one of these words whole ("conversational" counts,
   "base_model:finetune:google/gemma-3-270m" does not).
3. `general.name`, then `general.basename`: the same words among the name's
   parts ("Gemma 3 270m It", "Qwen2.5-7B-Base").
4. no finetune where the converter would have written one: today's
   llama.cpp converter splits a model's id into basename, size label and
   finetune ("gemma-3-270m-it" -> "gemma-3", "270M", "it"), so a file with a
   `general.basename` or `general.size_label` and no `general.finetune` is the
   base model ("gemma-3-270m"). A chat word in one field outweighs a base word in
   it: a base model tuned to chat is no longer a base model.

Anything else (older converters wrote only `general.name`) is not stated, and
is treated as a chat model: the vocabulary's format, as before this rule. A
user's prompt-format setting overrides the whole choice.
"""

from __future__ import annotations

import enum
import functools
import itertools
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ModelFileError
from engine.model.gguf_header import read_local_header

TEMPLATE_KEY = "tokenizer.chat_template"
NAME_KEYS = ("general.name", "general.basename")
PARTS_KEYS = ("general.basename", "general.size_label")  # written by a converter that parses ids
FINETUNE_KEY = "general.finetune"
TAGS_KEY = "general.tags"
PURPOSE_KEYS = (*NAME_KEYS, "general.size_label", FINETUNE_KEY, TAGS_KEY)

CHAT_WORDS = frozenset({
    "instruct", "instruction", "instructed", "inst", "it", "chat", "chatbot", "assistant",
    "conversational", "sft", "dpo", "orpo", "kto", "simpo", "rlhf",
})  # fmt: skip
BASE_WORDS = frozenset({"base", "pt", "pretrain", "pretrained", "pretraining"})
_WORD_SPLIT = re.compile(r"[^0-9a-z]+")
_MAX_SHOWN = 60  # characters of a field's value quoted in a reason
_MAX_TAGS = 256  # a hostile file's million tags are not all read


class Purpose(enum.Enum):
    CHAT = "chat"  # instruction- or chat-tuned
    BASE = "base"  # pretrained only
    UNSTATED = "unstated"  # the file does not say; treated as chat


@dataclass(frozen=True)
class ModelPurpose:
    """What the model was trained for, and the evidence, in words for people."""

    purpose: Purpose
    evidence: str  # "general.finetune is 'it'"

    @property
    def is_base(self) -> bool:
        return self.purpose is Purpose.BASE

    @property
    def label(self) -> str:
        """ "base model", "chat model" or "not stated"."""
        return {
            Purpose.CHAT: "chat model",
            Purpose.BASE: "base model",
            Purpose.UNSTATED: "not stated",
        }[self.purpose]

    def describe(self) -> str:
        """One line: "base model (general.basename 'gemma-3' and no general.finetune)"."""
        if self.purpose is Purpose.UNSTATED:
            return f"not stated ({self.evidence}; treated as a chat model)"
        return f"{self.label} ({self.evidence})"


def judge_purpose(has_template: bool, fields: Mapping[str, object]) -> ModelPurpose:
    """The rule of this module over a GGUF's chat-template presence and its general.* fields."""
    if has_template:
        return ModelPurpose(Purpose.CHAT, "it has a chat template")
    finetune = _text(fields.get(FINETUNE_KEY))
    if finetune and (said := _said_by(_words(finetune))):
        return ModelPurpose(said, f"{FINETUNE_KEY} is {_quoted(finetune)}")
    for tag in _tags(fields.get(TAGS_KEY)):
        if said := _said_by([tag.strip().lower()]):
            return ModelPurpose(said, f"{TAGS_KEY} holds {_quoted(tag)}")
    for key in NAME_KEYS:
        name = _text(fields.get(key))
        if said := _said_by(_words(name)):
            word = _deciding_word(_words(name), said)
            return ModelPurpose(said, f"{key} {_quoted(name)} says {word!r}")
    if not finetune:
        for key in PARTS_KEYS:
            if value := _text(fields.get(key)):
                return ModelPurpose(Purpose.BASE, f"{key} {_quoted(value)} and no {FINETUNE_KEY}")
    return ModelPurpose(
        Purpose.UNSTATED, "no chat template, and no finetune, tag or name says base or chat"
    )


def purpose_of_file(path: str | os.PathLike[str]) -> ModelPurpose:
    """The purpose of a local GGUF (the first part of a split one holds these keys), read from
    its header; ModelFileError when the file is missing or not a readable GGUF."""
    resolved = Path(path).resolve()
    try:
        stat = resolved.stat()
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return _purpose_of_version(str(resolved), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _purpose_of_version(path: str, _size: int, _mtime_ns: int) -> ModelPurpose:
    """Kept per file version: the model list asks for every model each time it is shown."""
    header = read_local_header(path)
    fields = {key: header.field(key) for key in PURPOSE_KEYS}
    return judge_purpose(bool(_text(header.field(TEMPLATE_KEY))), fields)


def _said_by(words: Iterable[str]) -> Purpose | None:
    """CHAT when a chat word is among `words`, else BASE when a base word is, else None."""
    found = set(words)
    if found & CHAT_WORDS:
        return Purpose.CHAT
    if found & BASE_WORDS:
        return Purpose.BASE
    return None


def _deciding_word(words: list[str], said: Purpose) -> str:
    wanted = CHAT_WORDS if said is Purpose.CHAT else BASE_WORDS
    return next(word for word in words if word in wanted)


def _words(text: str) -> list[str]:
    return [w for w in _WORD_SPLIT.split(text.lower()) if w]


def _text(value: object) -> str:
    """A string field's value; anything else (a hostile file's number or list) is no text."""
    return value.strip() if isinstance(value, str) else ""


def _tags(value: object) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        return []
    return [tag for tag in itertools.islice(value, _MAX_TAGS) if isinstance(tag, str)]


def _quoted(text: str) -> str:
    shown = text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"
    return repr(shown)
