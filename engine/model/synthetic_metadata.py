"""A synthetic model's GGUF keys: its architecture's hyper-parameters and a real tokenizer.

The tokenizer (every ``tokenizer.ggml.*`` key and the chat template) is copied
from the embedded default model, so synthetic models tokenize and template
prompts like a real one. ``SyntheticSpec.tokenizer_size`` pads it with generated
byte-pair tokens and their merges, so a shape-true model's header is as large as
the real model's (151,936 tokens and ~151k merges for Qwen3) without a second
tokenizer to copy; the padding tokens are never produced by tokenizing text.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import gguf

from engine.model.default_model import default_model_path
from engine.model.synthetic_spec import (
    FILE_TYPES,
    GEMMA3_ROPE_BASE,
    RMS_EPS,
    ROPE_FREQ_BASE,
    SyntheticSpec,
)

_TOKENIZER_PREFIX = "tokenizer."


# ---------------------------------------------------------------- metadata


def add_metadata(writer: gguf.GGUFWriter, spec: SyntheticSpec, quant: str) -> None:
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(spec.model_name)
    writer.add_file_type(_file_type(quant))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    _add_hparams(writer, spec)
    if spec.is_moe:
        _add_moe_hparams(writer, spec)
    if spec.architecture == "gemma3":
        _add_gemma3_hparams(writer, spec)
    if spec.architecture == "qwen2vl":
        writer.add_rope_dimension_sections(list(mrope_sections(spec.head_size)))
    if spec.vocab_size is not None:
        writer.add_tokenizer_model("none")
        return
    for key, value, vtype, sub_type in _tokenizer_fields():
        if key == gguf.Keys.Tokenizer.LIST:
            value = _token_list(value, spec)
        elif key == gguf.Keys.Tokenizer.TOKEN_TYPE:
            value = _token_types(value, spec)
        elif key == gguf.Keys.Tokenizer.MERGES and spec.tokenizer_size is not None:
            value = [*value, *_padding(spec)[1]]
        elif key == gguf.Keys.Tokenizer.CHAT_TEMPLATE and spec.chat_template is not None:
            continue  # written below, if at all
        writer.add_key_value(key, value, vtype, sub_type)
    if spec.chat_template:
        writer.add_chat_template(spec.chat_template)


def _file_type(quant: str) -> gguf.LlamaFileType:
    """general.file_type for `quant`: a type written directly, or a llama.cpp mix ("Q4_K_M")."""
    if quant in FILE_TYPES:
        return FILE_TYPES[quant]
    try:
        return gguf.LlamaFileType[f"MOSTLY_{quant}"]
    except KeyError:
        raise ValueError(f"no llama.cpp file type is called {quant!r}") from None


def _token_list(tokens: list[str], spec: SyntheticSpec) -> list[str]:
    """The copied token texts, renamed as the spec says, with its extra tokens appended."""
    renames = dict(spec.renamed_tokens)
    if missing := set(renames).difference(tokens):
        raise ValueError(f"renamed_tokens not in the vocabulary: {sorted(missing)}")
    tokens = [renames.get(token, token) for token in tokens]
    if taken := set(spec.extra_tokens).intersection(tokens):
        raise ValueError(f"extra_tokens already in the vocabulary: {sorted(taken)}")
    return [*tokens, *_padding(spec)[0], *spec.extra_tokens]


def _token_types(types: list[int], spec: SyntheticSpec) -> list[int]:
    """The copied token types, then NORMAL for the padding and CONTROL for the extra tokens."""
    padding = [gguf.TokenType.NORMAL] * len(_padding(spec)[0])
    return [*types, *padding, *[gguf.TokenType.CONTROL] * len(spec.extra_tokens)]


def _padding(spec: SyntheticSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(tokens, merges) generated to pad the copied tokenizer to spec.tokenizer_size."""
    if spec.tokenizer_size is None:
        return (), ()
    n_padding = spec.tokenizer_size - _vocab_size() - len(spec.extra_tokens)
    if n_padding < 0:
        raise ValueError(
            f"tokenizer_size {spec.tokenizer_size} is smaller than the copied tokenizer "
            f"and the extra tokens ({_vocab_size() + len(spec.extra_tokens)})"
        )
    renamed = tuple(new for _, new in spec.renamed_tokens)
    return _generated_tokens(n_padding, (*spec.extra_tokens, *renamed))


_SYLLABLES = tuple(c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou")


@cache
def _generated_tokens(
    count: int, reserved: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`count` distinct byte-pair-like tokens ("Ġkamo", "rebuti", ...) that are neither in the
    copied vocabulary nor `reserved`, and for each the merge of its first syllable with the rest."""
    taken = {*_copied_tokens(), *reserved}
    tokens: list[str] = []
    merges: list[str] = []
    index = 0
    while len(tokens) < count:
        prefix = "Ġ" if index % 2 == 0 else ""  # GPT-2's byte-level space
        syllables = _syllables_of(index)
        index += 1
        token = prefix + "".join(syllables)
        if token in taken:
            continue
        tokens.append(token)
        merges.append(f"{prefix}{syllables[0]} {''.join(syllables[1:])}")
    return tuple(tokens), tuple(merges)


def _syllables_of(index: int) -> list[str]:
    """`index` written in base len(_SYLLABLES), at least two digits: distinct for every index."""
    digits: list[str] = []
    while index or len(digits) < 2:
        index, digit = divmod(index, len(_SYLLABLES))
        digits.append(_SYLLABLES[digit])
    return digits


def _add_hparams(writer: gguf.GGUFWriter, spec: SyntheticSpec) -> None:
    writer.add_vocab_size(vocab_size_of(spec))
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    # llama.cpp derives these from n_embd / n_head unless told; llama requires n_rot == head size.
    writer.add_key_length(spec.head_size)
    writer.add_value_length(spec.head_size)
    writer.add_rope_dimension_count(spec.head_size)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    if spec.architecture in ROPE_FREQ_BASE:
        writer.add_rope_freq_base(ROPE_FREQ_BASE[spec.architecture])


def mrope_sections(head_size: int) -> tuple[int, int, int, int]:
    """M-RoPE's rotary pairs per section (time, height, width, unused), as Qwen2-VL splits them.

    Qwen2-VL's 128-wide heads give [16, 24, 24, 0]: a quarter of the pairs to time, the
    rest halved between height and width. They always add up to head_size / 2.
    """
    pairs = head_size // 2
    spatial = (pairs - pairs // 4) // 2
    return (pairs - 2 * spatial, spatial, spatial, 0)


def _add_moe_hparams(writer: gguf.GGUFWriter, spec: SyntheticSpec) -> None:
    writer.add_expert_count(spec.n_expert)
    writer.add_expert_used_count(spec.n_expert_used)
    writer.add_expert_feed_forward_length(spec.n_ff_expert)


def _add_gemma3_hparams(writer: gguf.GGUFWriter, spec: SyntheticSpec) -> None:
    # With a sliding window llama.cpp uses its default gemma3 pattern: 5 local layers, 1 global.
    writer.add_sliding_window(spec.sliding_window)
    writer.add_rope_freq_base(GEMMA3_ROPE_BASE[0])
    writer.add_rope_freq_base_swa(GEMMA3_ROPE_BASE[1])


# ---------------------------------------------------------------- tokenizer


@cache
def _tokenizer_fields() -> tuple[tuple[str, Any, gguf.GGUFValueType, Any], ...]:
    """(key, value, type, array element type) of the default model's tokenizer keys."""
    reader = gguf.GGUFReader(default_model_path())
    fields = []
    for key, field in reader.fields.items():
        if key.startswith(_TOKENIZER_PREFIX):
            sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            fields.append((key, field.contents(), field.types[0], sub_type))
    return tuple(fields)


def vocab_size_of(spec: SyntheticSpec) -> int:
    if spec.vocab_size is not None:
        return spec.vocab_size
    if spec.tokenizer_size is not None:
        return spec.tokenizer_size
    return _vocab_size() + len(spec.extra_tokens)


def _vocab_size() -> int:
    return len(_copied_tokens())


def _copied_tokens() -> list[str]:
    for key, value, _, _ in _tokenizer_fields():
        if key == gguf.Keys.Tokenizer.LIST:
            return list(value)
    raise ValueError(f"{default_model_path()} has no {gguf.Keys.Tokenizer.LIST}")
