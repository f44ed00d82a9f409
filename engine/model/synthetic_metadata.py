"""A synthetic model's GGUF keys: its architecture's hyper-parameters and a real tokenizer.

The tokenizer (every ``tokenizer.ggml.*`` key and the chat template) is copied
from the embedded default model, so synthetic models tokenize and template
prompts like a real one.
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
    writer.add_file_type(FILE_TYPES[quant])
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
        if spec.extra_tokens and key == gguf.Keys.Tokenizer.LIST:
            if taken := set(spec.extra_tokens).intersection(value):
                raise ValueError(f"extra_tokens already in the vocabulary: {sorted(taken)}")
            value = [*value, *spec.extra_tokens]
        elif spec.extra_tokens and key == gguf.Keys.Tokenizer.TOKEN_TYPE:
            value = [*value, *[gguf.TokenType.CONTROL] * len(spec.extra_tokens)]
        elif spec.chat_template is not None and key == gguf.Keys.Tokenizer.CHAT_TEMPLATE:
            value = spec.chat_template
        writer.add_key_value(key, value, vtype, sub_type)


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
    return _vocab_size() + len(spec.extra_tokens)


def _vocab_size() -> int:
    for key, value, _, _ in _tokenizer_fields():
        if key == gguf.Keys.Tokenizer.LIST:
            return len(value)
    raise ValueError(f"{default_model_path()} has no {gguf.Keys.Tokenizer.LIST}")
