"""What a GGUF model is made of, read from its header without loading weights.

The planner decides placement per sub-layer (attention, dense FFN, MoE router,
routed experts, shared experts, embeddings, output head), so the inventory
groups every tensor of the file into those sub-layers with their byte sizes,
and derives the KV-cache cost per token from the hyper-parameters.

It is built from parsed GGUF headers (`engine.model.gguf_header`), never from
the weights, so a remote model whose header alone was fetched gets the same
inventory as the downloaded file; a split model is read from all its parts.

Tensor roles are classified through one table keyed by gguf's own tensor
constants, which every architecture shares; only the few facts that really
differ per architecture (sliding-window pattern) live in a second table.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import gguf

from engine.errors import ModelFileError
from engine.known_fields import known_fields
from engine.model.gguf_checks import check_header
from engine.model.gguf_file import check_model_path
from engine.model.gguf_header import GGUFHeader, TensorInfo, read_local_header
from engine.model.gguf_strings import StringArray
from engine.model.model_naming import split_parts

KV_CACHE_BYTES_PER_ELEMENT = 2  # the KV cache stays f16: lossless, always
VISION_ARCHITECTURE = "clip"


class SubLayerKind(str, Enum):
    """The units the planner places; values are stable names for JSON and tables."""

    ATTENTION = "attention"
    DENSE_FFN = "dense_ffn"
    MOE_ROUTER = "moe_router"
    ROUTED_EXPERTS = "routed_experts"
    SHARED_EXPERTS = "shared_experts"
    TOKEN_EMBEDDING = "token_embedding"
    OUTPUT_NORM = "output_norm"
    OUTPUT_HEAD = "output_head"
    VISION_ENCODER = "vision_encoder"
    VISION_PROJECTOR = "vision_projector"
    OTHER = "other"


T = gguf.MODEL_TENSOR
K = SubLayerKind
_KIND_BY_TENSOR: dict[gguf.MODEL_TENSOR, SubLayerKind] = {
    **dict.fromkeys(
        [
            T.ATTN_NORM, T.ATTN_NORM_2, T.ATTN_QKV, T.ATTN_Q, T.ATTN_K, T.ATTN_V,
            T.ATTN_OUT, T.ATTN_ROT_EMBD, T.ATTN_SINKS, T.ATTN_GATE, T.ATTN_Q_NORM,
            T.ATTN_K_NORM, T.ATTN_OUT_NORM, T.ATTN_POST_NORM, T.ATTN_Q_A, T.ATTN_Q_B,
            T.ATTN_KV_A_MQA, T.ATTN_KV_B, T.ATTN_K_B, T.ATTN_V_B, T.ATTN_Q_A_NORM,
            T.ATTN_KV_A_NORM, T.ATTN_SUB_NORM,
        ],
        K.ATTENTION,
    ),
    **dict.fromkeys(
        [T.FFN_NORM, T.FFN_POST_NORM, T.FFN_GATE, T.FFN_UP, T.FFN_DOWN, T.FFN_SUB_NORM],
        K.DENSE_FFN,
    ),
    **dict.fromkeys([T.FFN_GATE_INP, T.FFN_EXP_PROBS_B], K.MOE_ROUTER),
    **dict.fromkeys(
        [T.FFN_GATE_EXP, T.FFN_UP_EXP, T.FFN_DOWN_EXP, T.FFN_GATE_UP_EXP, T.FFN_NORM_EXP],
        K.ROUTED_EXPERTS,
    ),
    **dict.fromkeys(
        [
            T.FFN_GATE_SHEXP, T.FFN_UP_SHEXP, T.FFN_DOWN_SHEXP, T.FFN_GATE_INP_SHEXP,
            T.FFN_GATE_CHEXP, T.FFN_UP_CHEXP, T.FFN_DOWN_CHEXP,
        ],
        K.SHARED_EXPERTS,
    ),
    T.TOKEN_EMBD: K.TOKEN_EMBEDDING,
    T.TOKEN_EMBD_NORM: K.TOKEN_EMBEDDING,
    T.POS_EMBD: K.TOKEN_EMBEDDING,
    T.OUTPUT_NORM: K.OUTPUT_NORM,
    T.OUTPUT: K.OUTPUT_HEAD,
}  # fmt: skip
del T, K

# "blk.{bid}.attn_q" -> "attn_q"; global tensors keep their whole name.
_KIND_BY_ROLE: dict[str, SubLayerKind] = {
    gguf.TENSOR_NAMES[tensor].removeprefix("blk.{bid}."): kind
    for tensor, kind in _KIND_BY_TENSOR.items()
}

# Layers that use a sliding window, when the file does not say: every n-th layer is global.
_SWA_PATTERN_BY_ARCH: dict[str, int] = {"gemma2": 2, "gemma3": 6, "cohere2": 4}

_BLOCK_TENSOR = re.compile(r"^blk\.(\d+)\.(.+?)(?:\.(?:weight|bias|scale))?$")
_GLOBAL_TENSOR = re.compile(r"^(.+?)(?:\.(?:weight|bias))?$")
_SPLIT_NAME = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")  # gguf-split's


@dataclass(frozen=True)
class SubLayer:
    """One placeable unit: all tensors of one kind in one block (or global)."""

    kind: SubLayerKind
    block: int | None
    n_bytes: int
    n_params: int
    tensor_names: tuple[str, ...]
    quant_types: tuple[str, ...]
    # its largest tensor: a streamed one is uploaded whole into one staging slot
    largest_tensor_bytes: int = 0

    @property
    def slot_bytes(self) -> int:
        """A staging slot's share of it (an inventory stored before the field: all of it)."""
        return self.largest_tensor_bytes or self.n_bytes

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SubLayer:
        known = known_fields(cls, data)
        known["kind"] = SubLayerKind(known["kind"])
        known["tensor_names"] = tuple(known.get("tensor_names", ()))
        known["quant_types"] = tuple(known.get("quant_types", ()))
        return cls(**known)


@dataclass(frozen=True)
class BlockInventory:
    """One transformer block: its sub-layers and its KV-cache cost."""

    index: int
    sublayers: tuple[SubLayer, ...]
    kv_bytes_per_token: int
    sliding_window: int | None = None

    @property
    def n_bytes(self) -> int:
        return sum(s.n_bytes for s in self.sublayers)

    def sublayer(self, kind: SubLayerKind) -> SubLayer | None:
        return next((s for s in self.sublayers if s.kind is kind), None)

    def kv_cache_bytes(self, n_ctx: int) -> int:
        cells = n_ctx if self.sliding_window is None else min(n_ctx, self.sliding_window)
        return self.kv_bytes_per_token * cells

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BlockInventory:
        known = known_fields(cls, data)
        known["sublayers"] = tuple(SubLayer.from_dict(s) for s in known.get("sublayers", ()))
        return cls(**known)


@dataclass(frozen=True)
class ModelInventory:
    """Everything the planner needs to know about a model file, and nothing it must load."""

    path: str
    file_bytes: int
    architecture: str
    name: str
    n_params: int
    context_length: int | None
    n_embd: int | None
    n_layer: int
    n_head: int | None
    n_head_kv: int | None
    n_vocab: int | None
    expert_count: int = 0
    expert_used_count: int = 0
    expert_shared_count: int = 0
    tied_output: bool = False
    is_vision_projector: bool = False
    projector_type: str | None = None
    longest_token_bytes: int = 0  # of the token list's texts, UTF-8 (0: no token list)
    quant_bytes: dict[str, int] = field(default_factory=dict)
    blocks: tuple[BlockInventory, ...] = ()
    globals: tuple[SubLayer, ...] = ()

    @property
    def is_moe(self) -> bool:
        return self.expert_count > 0

    @property
    def query_width(self) -> int:
        """All query heads side by side (heads x head size): what attention work scales with."""
        per_layer_kv = self.blocks[0].kv_bytes_per_token if self.blocks else 0
        if not per_layer_kv or not self.n_head or not self.n_head_kv:
            return self.n_embd or 0
        head_size = per_layer_kv // (self.n_head_kv * 2 * KV_CACHE_BYTES_PER_ELEMENT)
        return self.n_head * head_size

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes one token adds across all layers, before sliding windows cap them."""
        return sum(b.kv_bytes_per_token for b in self.blocks)

    @property
    def tensor_bytes(self) -> int:
        return sum(b.n_bytes for b in self.blocks) + sum(s.n_bytes for s in self.globals)

    def kv_cache_bytes(self, n_ctx: int) -> int:
        """KV-cache bytes for a context of n_ctx tokens, sliding-window layers capped."""
        return sum(b.kv_cache_bytes(n_ctx) for b in self.blocks)

    def bytes_by_kind(self) -> dict[SubLayerKind, int]:
        totals: dict[SubLayerKind, int] = defaultdict(int)
        for sub in self.all_sublayers():
            totals[sub.kind] += sub.n_bytes
        return dict(totals)

    def all_sublayers(self) -> list[SubLayer]:
        return [s for b in self.blocks for s in b.sublayers] + list(self.globals)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kv_bytes_per_token"] = self.kv_bytes_per_token
        data["is_moe"] = self.is_moe
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelInventory:
        known = known_fields(cls, data)
        known["blocks"] = tuple(BlockInventory.from_dict(b) for b in known.get("blocks", ()))
        known["globals"] = tuple(SubLayer.from_dict(s) for s in known.get("globals", ()))
        return cls(**known)


def read_inventory(path: str | os.PathLike[str]) -> ModelInventory:
    """Read a GGUF's inventory; raises ModelFileError for anything that is not a usable GGUF.

    A split model (``…-00001-of-00003.gguf``) is read from all its parts. One
    load asks several times (CLI, worker, runtime), so results are kept per
    file version: the same paths, sizes and modification times.
    """
    model_path = check_model_path(path).resolve()
    versions = tuple(_file_version(p) for p in split_parts(model_path))
    with _reading(str(model_path)):  # a second asker of this file takes the first's result
        return _read_inventory(str(model_path), versions)


def inventory_from_headers(
    headers: Sequence[GGUFHeader],
    path: str,
    file_bytes: int,
    part_bytes: Sequence[int | None] = (),
) -> ModelInventory:
    """The inventory of a model from its files' headers, one per split part in split order.

    Metadata comes from the first header, tensors from all of them; `path`
    names the model (a local path or e.g. ``hf://repo/file.gguf``) and
    `file_bytes` is the size of all parts together, `part_bytes` each part's
    where known. Every header must pass `engine.model.gguf_checks` first.
    """
    if not headers:
        raise ValueError("a model has at least one GGUF header")
    sizes = list(part_bytes) + [None] * (len(headers) - len(part_bytes))
    for number, (header, size) in enumerate(zip(headers, sizes, strict=True)):
        try:
            check_header(header, size, first_part=number == 0)
        except ModelFileError as exc:
            raise ModelFileError(f"{path}: {exc}") from None
    tensors = [t for header in headers for t in header.tensors]
    return _inventory_of(headers[0].fields, tensors, path, file_bytes)


def _file_version(path: Path) -> tuple[str, int, int]:
    try:
        stat = path.stat()
    except OSError:
        return str(path), -1, -1  # a missing part: refused when read, and not cached stale
    return str(path), stat.st_size, stat.st_mtime_ns


_READING: dict[str, threading.Lock] = {}  # per file: the window's model list and the
_READING_GUARD = threading.Lock()  # engine's first load ask at once; other files never wait


def _reading(path: str) -> threading.Lock:
    with _READING_GUARD:
        return _READING.setdefault(path, threading.Lock())


@functools.lru_cache(maxsize=16)
def _read_inventory(path: str, _versions: tuple[tuple[str, int, int], ...]) -> ModelInventory:
    first_path = Path(path)
    first = _local_header(first_path)
    parts = _split_parts(first_path, first)
    headers = [first, *(_local_header(p, first_path) for p in parts[1:])]
    sizes = [p.stat().st_size for p in parts]
    return inventory_from_headers(headers, path, sum(sizes), sizes)


def _local_header(path: Path, first_part: Path | None = None) -> GGUFHeader:
    if first_part is not None and not path.exists():
        raise ModelFileError(f"{first_part}: a part of this split model is missing: {path}")
    return read_local_header(check_model_path(path))


def _split_parts(path: Path, header: GGUFHeader) -> list[Path]:
    """The files of the model whose first file is `path`; refuses a later part or odd names.

    As llama.cpp does, the header's split.count decides whether there are other
    parts and the file name (gguf-split's pattern) says where they are.
    """
    declared = header.field("split.count", 1)
    count = declared if isinstance(declared, int) else 1
    if count <= 1:
        return [path]
    match = _SPLIT_NAME.match(path.name)
    if match is None or int(match["count"]) != count:
        raise ModelFileError(
            f"{path}: one of {count} parts of a split model, but not named "
            f"…-00001-of-{count:05d}.gguf, so its other parts cannot be found"
        )
    part_no = int(match["no"])
    if part_no != 1 or header.field("split.no", 0) != 0:
        first = split_parts(path)[0]
        raise ModelFileError(
            f"{path}: part {part_no} of {count} of a split model; open its first part, {first.name}"
        )
    return split_parts(path)


def _inventory_of(
    fields: Mapping[str, object], tensor_infos: Sequence[TensorInfo], path: str, file_bytes: int
) -> ModelInventory:
    arch = str(fields.get("general.architecture", "unknown"))
    hp = _Hyper(fields, arch)
    tensors = [_classified(t) for t in tensor_infos]
    block_ids = sorted({t.block for t in tensors if t.block is not None})
    has_experts = any(t.kind is SubLayerKind.ROUTED_EXPERTS for t in tensors)
    tensors = [_moe_ffn_norm_to_router(t, has_experts) for t in tensors]
    n_layer = int(hp.get("block_count", len(block_ids)) or 0)
    quant_bytes: Counter[str] = Counter()
    for t in tensors:
        quant_bytes[t.quant] += t.n_bytes
    return ModelInventory(
        path=path,
        file_bytes=file_bytes,
        architecture=arch,
        name=str(fields.get("general.name", Path(path).stem)),
        n_params=sum(t.n_elements for t in tensors),
        context_length=hp.number("context_length"),
        n_embd=hp.number("embedding_length"),
        n_layer=n_layer,
        n_head=hp.layer_int("attention.head_count", 0),
        n_head_kv=hp.layer_int("attention.head_count_kv", 0),
        n_vocab=_vocab_size(fields, hp),
        longest_token_bytes=_longest_token_bytes(fields),
        expert_count=hp.number("expert_count") or 0,
        expert_used_count=hp.number("expert_used_count") or 0,
        expert_shared_count=hp.number("expert_shared_count") or 0,
        tied_output=not any(t.kind is SubLayerKind.OUTPUT_HEAD for t in tensors),
        is_vision_projector=arch == VISION_ARCHITECTURE,
        projector_type=_projector_type(fields) if arch == VISION_ARCHITECTURE else None,
        quant_bytes=dict(quant_bytes.most_common()),
        blocks=tuple(_block(i, tensors, hp) for i in block_ids),
        globals=_group([t for t in tensors if t.block is None], None),
    )


@dataclass(frozen=True)
class _Tensor:
    name: str
    kind: SubLayerKind
    block: int | None
    quant: str
    n_elements: int
    n_bytes: int


def _classified(tensor: TensorInfo) -> _Tensor:
    block, kind = _role_of(tensor.name)
    return _Tensor(
        name=tensor.name,
        kind=kind,
        block=block,
        quant=tensor.ggml_type.name,
        n_elements=tensor.n_elements,
        n_bytes=tensor.n_bytes,
    )


def _role_of(name: str) -> tuple[int | None, SubLayerKind]:
    if name.startswith("v."):
        return None, SubLayerKind.VISION_ENCODER
    if name.startswith("mm."):
        return None, SubLayerKind.VISION_PROJECTOR
    block_match = _BLOCK_TENSOR.match(name)
    if block_match:
        role = block_match.group(2)
        return int(block_match.group(1)), _KIND_BY_ROLE.get(role, SubLayerKind.OTHER)
    match = _GLOBAL_TENSOR.match(name)  # matches any non-empty name
    role = match.group(1) if match else name
    return None, _KIND_BY_ROLE.get(role, SubLayerKind.OTHER)


def _moe_ffn_norm_to_router(tensor: _Tensor, has_experts: bool) -> _Tensor:
    """In an MoE block the FFN norm feeds the router, so it travels with the router."""
    if not has_experts or tensor.kind is not SubLayerKind.DENSE_FFN:
        return tensor
    if "norm" not in tensor.name:
        return tensor
    return _Tensor(**{**asdict(tensor), "kind": SubLayerKind.MOE_ROUTER})


def _block(index: int, tensors: list[_Tensor], hp: _Hyper) -> BlockInventory:
    return BlockInventory(
        index=index,
        sublayers=_group([t for t in tensors if t.block == index], index),
        kv_bytes_per_token=hp.kv_bytes_per_token(index),
        sliding_window=hp.sliding_window(index),
    )


def _group(tensors: list[_Tensor], block: int | None) -> tuple[SubLayer, ...]:
    by_kind: dict[SubLayerKind, list[_Tensor]] = defaultdict(list)
    for t in tensors:
        by_kind[t.kind].append(t)
    return tuple(
        SubLayer(
            kind=kind,
            block=block,
            n_bytes=sum(t.n_bytes for t in members),
            n_params=sum(t.n_elements for t in members),
            tensor_names=tuple(t.name for t in members),
            quant_types=tuple(sorted({t.quant for t in members})),
            largest_tensor_bytes=max(t.n_bytes for t in members),
        )
        for kind in SubLayerKind
        if (members := by_kind.get(kind))
    )


class _Hyper:
    """Architecture-prefixed hyper-parameters, some of which may be per-layer arrays."""

    def __init__(self, fields: Mapping[str, object], arch: str) -> None:
        self._fields = fields
        self._arch = arch

    def get(self, key: str, default: object = None) -> Any:
        return self._fields.get(f"{self._arch}.{key}", default)

    def number(self, key: str) -> int | None:
        value = self.get(key)
        return None if value is None or isinstance(value, list) else int(value)

    def layer_int(self, key: str, layer: int) -> int | None:
        value = self.get(key)
        if isinstance(value, list):
            return int(value[layer]) if layer < len(value) else None
        return None if value is None else int(value)

    def kv_bytes_per_token(self, layer: int) -> int:
        n_embd, n_head = self.number("embedding_length"), self.layer_int("attention.head_count", 0)
        n_head_kv = self.layer_int("attention.head_count_kv", layer)
        if n_head_kv is None:
            n_head_kv = self.layer_int("attention.head_count", layer)
        if not n_head_kv:
            return 0  # no attention in this layer (e.g. a recurrent layer)
        default_head_dim = n_embd // n_head if n_embd and n_head else 0
        key_len = self.number("attention.key_length") or default_head_dim
        value_len = self.number("attention.value_length") or default_head_dim
        return n_head_kv * (key_len + value_len) * KV_CACHE_BYTES_PER_ELEMENT

    def sliding_window(self, layer: int) -> int | None:
        window = self.number("attention.sliding_window")
        if not window:
            return None
        pattern = self.get("attention.sliding_window_pattern")
        if isinstance(pattern, list):
            return window if layer < len(pattern) and pattern[layer] else None
        period = int(pattern) if pattern else _SWA_PATTERN_BY_ARCH.get(self._arch, 0)
        if period <= 1:
            return window if period == 1 else None
        return window if layer % period < period - 1 else None


def _vocab_size(fields: Mapping[str, object], hp: _Hyper) -> int | None:
    explicit = hp.number("vocab_size")
    if explicit:
        return explicit
    tokens = fields.get("tokenizer.ggml.tokens")
    return len(tokens) if isinstance(tokens, (list, StringArray)) else None


def _longest_token_bytes(fields: Mapping[str, object]) -> int:
    """What llama.cpp's vocabulary calls the longest token text, from the header already
    read (a tokenizer's list is walked, not decoded: it knows its longest), where asking
    llama.cpp token by token after the load took 23 ms before the window heard the model
    was ready. In a short list decoded already, a byte the decoding replaced counts 3, so
    the figure never comes out below llama.cpp's."""
    tokens = fields.get("tokenizer.ggml.tokens")
    if isinstance(tokens, StringArray):
        return tokens.longest_bytes
    if not isinstance(tokens, list):
        return 0
    try:
        return max(map(len, map(str.encode, tokens)), default=0)
    except TypeError:  # a malformed list, not of strings: the load will refuse the file
        return 0


def _projector_type(fields: Mapping[str, object]) -> str | None:
    value = fields.get("clip.projector_type")
    if value is None:
        value = fields.get("clip.vision.projector_type")
    return None if value is None else str(value)
