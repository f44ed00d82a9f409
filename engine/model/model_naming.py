"""A model's name as people read it, made from its file name.

Why the file name and not `general.name`: the GGUF's own name is whatever the
converter wrote ("Smollm2 135M 8k Lc100K Mix1 Ep2" for the default model),
while the file name is what its publisher chose to tell models apart: family,
size, variant and quant ("SmolLM2-135M-Instruct.Q4_1.gguf"). LM Studio and Jan
show names made from it, so ShardChat does too:

    Qwen2.5-7B-Instruct-Q4_K_M.gguf       -> Qwen2.5 7B Instruct · Q4_K_M
    gemma-3-27b-it-UD-Q4_K_XL.gguf        -> Gemma 3 27B IT · UD-Q4_K_XL
    …-Q8_0-00001-of-00002.gguf            -> the split suffix is dropped

Capitalisation: a word the publisher capitalised is kept as written
("SmolLM2", "DeepSeek"); a lowercase one is title-cased ("llama" -> "Llama"),
with a few words and families spelt their own way ("it" -> "IT",
"codellama" -> "CodeLlama"); sizes get an upper-case unit ("7b" -> "7B").

When the file name says nothing but the quant ("model-q4_k_m.gguf",
"ggml-model-f16.gguf"), the GGUF's own name stands in; failing that, the file
name. Nothing here reads the file.
"""

from __future__ import annotations

import re
from pathlib import Path

SEPARATOR = " · "
GGUF_SUFFIX = ".gguf"
PROJECTOR_MARK = "mmproj"

# The quant types and file types llama.cpp writes into file names. Longer spellings
# come first so "Q4_0_4_4" is not read as "Q4_0" and "Q4_K_M" not as "Q4_K".
_QUANT_TYPES = (
    r"Q4_0_(?:4_4|4_8|8_8)",
    r"Q[2-8]_K(?:_(?:XXL|XL|S|M|L))?",
    r"Q[4-8]_[01]",
    r"IQ[1-4]_(?:XXS|XS|NL|S|M|L)",
    r"TQ[12]_0",
    r"I2_S",
    r"MXFP4(?:_MOE)?",
    r"BF16",
    r"FP?16",
    r"FP?32",
)
# Bounded by anything but a letter or digit, so "BF16" never reads as "F16".
_QUANT = re.compile(
    r"(?<![A-Za-z0-9])(?P<quant>(?:UD-)?(?:" + "|".join(_QUANT_TYPES) + r"))(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_SPLIT_SUFFIX = re.compile(r"-(?P<part>\d{5})-of-(?P<count>\d{5})$", re.IGNORECASE)
# bartowski's newer files begin with the publisher: "google_gemma-3-12b-it-Q4_K_M.gguf"
_PUBLISHER_PREFIX = re.compile(r"^(?P<org>[A-Za-z][A-Za-z-]*)_(?P<rest>[A-Za-z0-9].*)$")
# Words split at -, _ and spaces, and at dots that are not inside a number ("Qwen2.5", "v0.3").
_WORD_BREAK = re.compile(r"[-_\s]+|(?<!\d)\.|\.(?!\d)")
_SIZE = re.compile(r"^(?P<count>(?:\d+x)?\d+(?:\.\d+)?)(?P<unit>[kmbt])$", re.IGNORECASE)
_ACTIVE_SIZE = re.compile(r"^(?P<mark>[ae])(?P<count>\d+(?:\.\d+)?)(?P<unit>[mb])$", re.IGNORECASE)
_PROJECTOR_WORD = re.compile(rf"(?<![A-Za-z0-9]){PROJECTOR_MARK}(?![A-Za-z0-9])", re.IGNORECASE)
_VERSION = re.compile(r"^v\d")
_LETTERS_THEN_REST = re.compile(r"^(?P<letters>[a-z]+)(?P<rest>.*)$")

# Words that say how the file was made or packed, not which model it is.
_PACKING_WORDS = frozenset({"gguf", "ggml", "i1", "imat", "imatrix"})
# Words that name no model: a file made only of these (and a quant) falls back.
_GENERIC_WORDS = frozenset({"model", "models", "ggml", "gguf", "weights", "unnamed"})
# Lower-case words spelt their own way (families first; the rest are common variant words).
_SPELLING = {
    "codellama": "CodeLlama",
    "deepseek": "DeepSeek",
    "exaone": "EXAONE",
    "glm": "GLM",
    "internlm": "InternLM",
    "llava": "LLaVA",
    "minicpm": "MiniCPM",
    "olmo": "OLMo",
    "olmoe": "OLMoE",
    "openhermes": "OpenHermes",
    "qwq": "QwQ",
    "smollm": "SmolLM",
    "smolvlm": "SmolVLM",
    "starcoder": "StarCoder",
    "tinyllama": "TinyLlama",
    "dpo": "DPO",
    "it": "IT",
    "moe": "MoE",
    "qat": "QAT",
    "rp": "RP",
    "sft": "SFT",
    "vl": "VL",
}
# Names whose family spells itself with a hyphen, kept whole before words are split.
_COMPOUND_FAMILIES = {"gpt-oss": "gpt-oss"}
# The GGUF type names behind older spellings of the float types.
_QUANT_SPELLING = {"FP16": "F16", "FP32": "F32"}


def readable_model_name(path: str | Path, general_name: str = "") -> str:
    """The name to show for a model file: its family, size and variant, then its quant.

    `general_name` (the GGUF's `general.name`) is used only when the file name
    names no model; a vision projector's name says that it is one.
    """
    stem = _stem(Path(path).name)
    quant = ""
    match = _last_quant(stem)
    if match is not None:
        quant = _quant_text(match.group("quant"))
        stem = (stem[: match.start()] + "-" + stem[match.end() :]).strip("-_. ")
    stem, marks = _PROJECTOR_WORD.subn("-", stem)
    projector = marks > 0
    words = _words(stem.strip("-_. "))
    if all(word.lower() in _GENERIC_WORDS for word in words):
        general = general_name.strip()
        if general:
            name = f"{general} vision projector" if projector else general
        elif projector:
            name = "Vision projector"
        else:
            return _stem(Path(path).name) or Path(path).name  # it already shows its quant
    else:
        name = " ".join(_joined_sizes([_spelt(word) for word in words]))
        if projector:
            name = f"{name} vision projector"
    return f"{name}{SEPARATOR}{quant}" if quant else name


def quant_in_name(path: str | Path) -> str | None:
    """The quant a file's name declares ("Q4_K_M", "UD-IQ1_S"), or None when it names none."""
    match = _last_quant(_stem(Path(path).name))
    return None if match is None else _quant_text(match.group("quant"))


def split_parts(path: str | Path) -> list[Path]:
    """Every part of a split GGUF ("…-00001-of-00003.gguf") next to this one, in order;
    just the file itself when it is not split. Parts are named, not checked to exist."""
    path = Path(path)
    name = path.name
    suffix = name[-len(GGUF_SUFFIX) :] if name.lower().endswith(GGUF_SUFFIX) else ""
    base = name[: len(name) - len(suffix)]
    match = _SPLIT_SUFFIX.search(base)
    if match is None:
        return [path]
    count = int(match.group("count"))
    head = base[: match.start()]
    width = len(match.group("part"))
    return [
        path.with_name(f"{head}-{index:0{width}d}-of-{match.group('count')}{suffix}")
        for index in range(1, count + 1)
    ]


def _stem(file_name: str) -> str:
    """The file name without .gguf and without a split suffix."""
    stem = file_name[: -len(GGUF_SUFFIX)] if file_name.lower().endswith(GGUF_SUFFIX) else file_name
    return _SPLIT_SUFFIX.sub("", stem)


def _last_quant(stem: str) -> re.Match[str] | None:
    """The quant nearest the end: publishers put it last, after any version numbers."""
    matches = list(_QUANT.finditer(stem))
    return matches[-1] if matches else None


def _quant_text(raw: str) -> str:
    upper = raw.upper()
    prefix = "UD-" if upper.startswith("UD-") else ""
    base = upper[len(prefix) :]
    return prefix + _QUANT_SPELLING.get(base, base)


def _words(stem: str) -> list[str]:
    prefix = _PUBLISHER_PREFIX.match(stem)
    # A publisher prefix is dropped only where the rest reads as a model name on its own
    # (hyphenated, no further underscores), so "open_llama_3b_v2" keeps its first word.
    if prefix is not None and "_" not in prefix.group("rest") and "-" in prefix.group("rest"):
        stem = prefix.group("rest")
    kept: dict[str, str] = {}
    for index, (compound, spelling) in enumerate(_COMPOUND_FAMILIES.items()):
        placeholder = f"\0{index}\0"
        pattern = re.compile(rf"(?<![A-Za-z0-9]){re.escape(compound)}(?![A-Za-z0-9])", re.I)
        if pattern.search(stem):
            stem = pattern.sub(placeholder, stem)
            kept[placeholder] = spelling
    words = [word for word in _WORD_BREAK.split(stem) if word]
    return [kept.get(word, word) for word in words if word.lower() not in _PACKING_WORDS]


def _spelt(word: str) -> str:
    """One word as shown: sizes with an upper-case unit, lowercase words title-cased."""
    size = _SIZE.match(word)
    if size is not None:
        return size.group("count").lower() + size.group("unit").upper()
    active = _ACTIVE_SIZE.match(word)
    if active is not None:
        return active.group("mark").upper() + active.group("count") + active.group("unit").upper()
    if word != word.lower() or word in _COMPOUND_FAMILIES.values() or _VERSION.match(word):
        return word  # the publisher's own capitalisation, a version ("v0.3"), a compound family
    if word in _SPELLING:
        return _SPELLING[word]
    letters = _LETTERS_THEN_REST.match(word)
    if letters is None:
        return word  # starts with a digit: "3n", "2507"
    head = letters.group("letters")
    return _SPELLING.get(head, head.capitalize()) + letters.group("rest")


def _joined_sizes(words: list[str]) -> list[str]:
    """A MoE's total and active sizes read as one: "30B", "A3B" -> "30B-A3B"."""
    joined: list[str] = []
    for word in words:
        if joined and word.startswith("A") and _ACTIVE_SIZE.match(word) and _SIZE.match(joined[-1]):
            joined[-1] = f"{joined[-1]}-{word}"
        else:
            joined.append(word)
    return joined
