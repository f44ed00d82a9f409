"""The values of a GGUF header that llama.cpp trusts, checked before llama.cpp sees them.

llama.cpp checks a file's structure, but many of its values only with
`GGML_ASSERT`, which aborts the whole process: a block count of 0 or above
512, more experts used than the model has, an unknown RoPE scaling type, a
tensor whose data is not 32-byte aligned in the mapped file, a NaN or negative
norm epsilon (asserted in the first decode). In ShardChat that process is the
window. So every value the engine or llama.cpp relies on is checked here, once,
for every way a file comes in: `shardchat info`, import, Discover's header
check and the load all build an inventory (`engine.model.inventory`), and the
inventory is built only from headers that pass.

The rules follow llama.cpp's own (llama-model.cpp `load_hparams`, gguf.cpp's
tensor table, ggml-backend's buffer alignment) and refuse what it would abort
on; what it refuses cleanly by itself (a tensor of the wrong shape, a missing
key) is left to it. A file that passes and still aborts llama.cpp is caught at
import by a load in a child process (`engine.llama.file_check`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import gguf

from engine.errors import ModelFileError
from engine.model.gguf_header import GGUFHeader

MAX_LAYERS = 512  # llama-hparams.h LLAMA_MAX_LAYERS
MAX_EXPERTS = 1024  # llama-hparams.h LLAMA_MAX_EXPERTS
TENSOR_ALIGNMENT = 32  # ggml-impl.h: a mapped tensor's address must be a multiple of this
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")  # llama-model.cpp
VISION_ARCHITECTURE = "clip"
# A trained context below ShardChat's least context (engine.llama.load_params) holds no
# chat; above int32 llama.cpp reports it negative (llama_model_n_ctx_train), and
# llama-cpp-python's tokenizer makes an array of that many tokens
MIN_CONTEXT = 16
MAX_CONTEXT = 2**31 - 1

# Counts llama.cpp reads as uint32 (per layer where marked), and the least each may be.
_COUNTS: dict[str, int] = {
    "embedding_length": 1,
    "vocab_size": 1,
    "expert_shared_count": 0,
    "expert_group_count": 0,
    "expert_group_used_count": 0,
    "nextn_predict_layers": 0,
    "attention.key_length": 1,
    "attention.value_length": 1,
    "attention.sliding_window": 0,
    "rope.dimension_count": 0,
}
_PER_LAYER_COUNTS = (
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "expert_used_count",
)
_MAX_COUNT = 2**32 - 1


class _Refusal(Exception):
    """Internal: one rule broken; the message says which value and what llama.cpp needs."""


def check_header(
    header: GGUFHeader, file_bytes: int | None = None, first_part: bool = True
) -> None:
    """Refuse (ModelFileError) a header whose values would abort or mislead llama.cpp.

    `file_bytes`, when known, is the size of the file the header starts, so
    every tensor's data must lie inside it. A split model's later parts carry
    tensors but no hyper-parameters (`first_part` False).
    """
    try:
        _check_numbers(header.fields)
        _check_tensor_table(header, file_bytes)
        arch = _architecture(header.fields) if first_part else None
        if arch == VISION_ARCHITECTURE:
            _check_counts_read(header.fields, arch)
        elif arch is not None:
            _check_hyperparameters(header.fields, arch)
    except _Refusal as refusal:
        raise ModelFileError(f"bad model file: {refusal}") from None


# -- every value ------------------------------------------------------------------------------


def _check_numbers(fields: Mapping[str, object]) -> None:
    """Floats finite everywhere (a NaN epsilon hangs or aborts the first decode)."""
    for key, value in fields.items():
        items = value if isinstance(value, list) else [value]
        if not items or not isinstance(items[0], float):  # a GGUF array has one item type
            continue
        floats = [item for item in items if isinstance(item, float)]
        for item in floats:
            if not math.isfinite(item):
                raise _Refusal(f"{key} is {item}, not a finite number")
        if key.endswith("epsilon") and any(v < 0 for v in floats):
            raise _Refusal(f"{key} is negative ({value}); llama.cpp needs it at least 0")


# -- the tensor table -------------------------------------------------------------------------


def _check_tensor_table(header: GGUFHeader, file_bytes: int | None) -> None:
    """Tensors laid out as gguf.cpp requires, each mappable where ggml needs it, inside the file."""
    expected = 0
    for tensor in header.tensors:
        block_size, _ = gguf.GGML_QUANT_SIZES[tensor.ggml_type]
        if tensor.shape and tensor.shape[0] % block_size:
            raise _Refusal(
                f"tensor {tensor.name!r} has rows of {tensor.shape[0]} values, not a multiple of "
                f"its type {tensor.ggml_type.name}'s block of {block_size}"
            )
        if tensor.n_bytes >= 2**63 or tensor.n_elements >= 2**63:
            raise _Refusal(f"tensor {tensor.name!r} is impossibly large")
        if tensor.offset != expected:
            raise _Refusal(
                f"tensor {tensor.name!r} starts at data offset {tensor.offset}, where llama.cpp "
                f"expects {expected} (the tensor table is damaged)"
            )
        if (header.data_offset + tensor.offset) % TENSOR_ALIGNMENT:
            raise _Refusal(
                f"tensor {tensor.name!r} lies at file offset {header.data_offset + tensor.offset}, "
                f"not a multiple of {TENSOR_ALIGNMENT} bytes (general.alignment "
                f"{header.alignment}); llama.cpp cannot map it"
            )
        expected += -(-tensor.n_bytes // header.alignment) * header.alignment
    if file_bytes is not None and header.tensors and header.data_end > file_bytes:
        raise ModelFileError(
            f"truncated GGUF (tensor data needs {header.data_end} bytes, the file has {file_bytes})"
        )


# -- hyper-parameters -------------------------------------------------------------------------


def _architecture(fields: Mapping[str, object]) -> str:
    """The name every hyper-parameter's key starts with."""
    arch = fields.get("general.architecture")
    if arch is None:
        raise _Refusal("general.architecture is missing")
    if not isinstance(arch, str) or not arch:
        raise _Refusal(f"general.architecture is {_shown(arch)}, not an architecture's name")
    return arch


def _check_hyperparameters(fields: Mapping[str, object], arch: str) -> None:
    n_layer = _count(fields, f"{arch}.block_count", least=1, required=True)
    if n_layer > MAX_LAYERS:
        raise _Refusal(f"{arch}.block_count is {n_layer}; llama.cpp allows at most {MAX_LAYERS}")
    for name, least in _COUNTS.items():
        _count(fields, f"{arch}.{name}", least=least)
    _check_context_length(fields, arch)
    _check_sliding_window_pattern(fields, arch)
    per_layer = {name: _per_layer(fields, f"{arch}.{name}", n_layer) for name in _PER_LAYER_COUNTS}
    nextn = _count(fields, f"{arch}.nextn_predict_layers", least=0)
    if nextn > n_layer:
        raise _Refusal(f"{arch}.nextn_predict_layers ({nextn}) exceeds block_count ({n_layer})")
    _check_heads(arch, per_layer["attention.head_count"], per_layer["attention.head_count_kv"])
    _check_experts(fields, arch, max(per_layer["expert_used_count"], default=0))
    _check_rope_scaling(fields, arch)


def _check_counts_read(fields: Mapping[str, object], arch: str) -> None:
    """A projector has no hyper-parameters llama.cpp needs, but the inventory reads its
    counts as for any model: each, where present, a whole number."""
    for name in ("block_count", "context_length", "expert_count", *_COUNTS):
        _count(fields, f"{arch}.{name}", least=0)
    for name in _PER_LAYER_COUNTS:
        value = fields.get(key := f"{arch}.{name}")
        for item in value if isinstance(value, list) else [] if value is None else [value]:
            _whole(key, item, 0)


def _count(fields: Mapping[str, object], key: str, least: int, required: bool = False) -> int:
    """A whole number in llama.cpp's uint32 range, or 0 when the key is absent (and optional)."""
    value = fields.get(key)
    if value is None:
        if required:
            raise _Refusal(f"{key} is missing")
        return 0
    return _whole(key, value, least)


def _whole(key: str, value: object, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Refusal(f"{key} is {_shown(value)}, not a whole number")
    if value < least:
        raise _Refusal(f"{key} is {value}; it must be at least {least}")
    if value > _MAX_COUNT:
        raise _Refusal(f"{key} is {value}; llama.cpp reads it as 32 bits, at most {_MAX_COUNT}")
    return value


def _per_layer(fields: Mapping[str, object], key: str, n_layer: int) -> list[int]:
    """One count per layer: a single number for all, or an array of exactly block_count."""
    value = fields.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        return [_whole(key, value, 0)] * n_layer
    if len(value) != n_layer:
        raise _Refusal(f"{key} has {len(value)} entries for {n_layer} layers")
    return [_whole(f"{key}[{i}]", item, 0) for i, item in enumerate(value)]


def _check_heads(arch: str, heads: list[int], kv_heads: list[int]) -> None:
    """Grouped-query attention shares each KV head among a whole number of query heads."""
    for layer, (n_head, n_kv) in enumerate(zip(heads, kv_heads, strict=False)):
        if n_kv and (n_kv > n_head or n_head % n_kv):
            raise _Refusal(
                f"{arch}.attention.head_count_kv ({n_kv}) does not divide head_count ({n_head}) "
                f"in layer {layer}"
            )


def _check_context_length(fields: Mapping[str, object], arch: str) -> None:
    key = f"{arch}.context_length"
    context = _count(fields, key, least=MIN_CONTEXT)
    if context > MAX_CONTEXT:
        raise _Refusal(f"{key} is {context}; llama.cpp reports at most {MAX_CONTEXT}")


def _check_sliding_window_pattern(fields: Mapping[str, object], arch: str) -> None:
    """As llama.cpp reads it (load_swa_pattern): a period (every n-th layer is global) or
    one flag per layer, bool or integer; the inventory reads it for every architecture."""
    key = f"{arch}.attention.sliding_window_pattern"
    value = fields.get(key)
    if value is None:
        return
    if not isinstance(value, list):
        _whole(key, value, 0)
        return
    if len(value) > MAX_LAYERS:
        raise _Refusal(f"{key} has {len(value)} entries; llama.cpp allows at most {MAX_LAYERS}")
    if value and not isinstance(value[0], int):  # a GGUF array has one item type
        raise _Refusal(f"{key} holds {_shown(value[0])}, not a flag per layer")


def _check_experts(fields: Mapping[str, object], arch: str, used: int) -> None:
    """llama.cpp's expert asserts (load_hparams), said in words."""
    experts = _count(fields, f"{arch}.expert_count", least=0)
    groups = _count(fields, f"{arch}.expert_group_count", least=0)
    groups_used = _count(fields, f"{arch}.expert_group_used_count", least=0)
    if experts > MAX_EXPERTS:
        raise _Refusal(f"{arch}.expert_count is {experts}; llama.cpp allows at most {MAX_EXPERTS}")
    if used > experts:
        raise _Refusal(f"{arch}.expert_used_count ({used}) exceeds expert_count ({experts})")
    if experts and not used:
        raise _Refusal(f"{arch}.expert_used_count is 0 in a model with {experts} experts")
    if not experts and groups:
        raise _Refusal(f"{arch}.expert_group_count is {groups} in a model without experts")
    if experts and groups >= experts:
        raise _Refusal(f"{arch}.expert_group_count ({groups}) is not below expert_count")
    if groups > 1 and (experts % groups or not 0 < groups_used < groups):
        raise _Refusal(
            f"{arch}: {experts} experts in {groups} groups with {groups_used} used do not add up"
        )


def _check_rope_scaling(fields: Mapping[str, object], arch: str) -> None:
    value = fields.get(f"{arch}.rope.scaling.type")
    if value is not None and value not in ROPE_SCALING_TYPES:
        raise _Refusal(
            f"{arch}.rope.scaling.type is {_shown(value)}; llama.cpp knows "
            f"{', '.join(ROPE_SCALING_TYPES)}"
        )


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
