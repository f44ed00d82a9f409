"""What an mmproj GGUF says about its vision encoder: shape, resolution scheme, weights."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from enum import Enum

import gguf

from engine.errors import ModelFileError
from engine.model.gguf_file import field_value, open_gguf, without_cyclic_gc
from engine.model.inventory import VISION_ARCHITECTURE

QWEN_VL_TYPES = frozenset({"qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger"})
# llama.cpp's own image token limits for dynamic-resolution projectors (clip.cpp).
DYNAMIC_TOKEN_LIMITS = dict.fromkeys(QWEN_VL_TYPES, (8, 4096))
DEFAULT_MERGE = {**dict.fromkeys(QWEN_VL_TYPES, 2), "gemma3": 4}
TILED_TYPES = frozenset({"idefics3"})
NON_CAUSAL_TYPES = frozenset({"gemma3"})  # mtmd_decode_use_non_causal


class Resolution(str, Enum):
    DYNAMIC = "dynamic"  # any size, aligned to patch x merge, within token limits
    FIXED = "fixed"  # always resized to image_size x image_size
    TILES = "tiles"  # resized to a longest edge, cut into image_size tiles + an overview


@dataclass(frozen=True)
class ProjectorFacts:
    """The vision encoder's shape, as llama.cpp's clip reads it from an mmproj GGUF."""

    projector_type: str
    width: int  # clip.vision.embedding_length
    n_layer: int
    n_head: int
    ffn: int
    patch_size: int
    merge: int  # patches merged per side into one token
    image_size: int  # native size (fixed), tile size (tiles)
    out_dim: int  # projection_dim: the language model's embedding width
    weights_bytes: int
    window_pattern: int = 0  # clip.vision.n_wa_pattern: > 0 means a window mask
    longest_edge: int = 0  # tiles: clip.vision.preproc_image_size
    name: str = ""

    @property
    def head_dim(self) -> int:
        return self.width // max(self.n_head, 1)

    @property
    def resolution(self) -> Resolution:
        if self.projector_type in DYNAMIC_TOKEN_LIMITS:
            return Resolution.DYNAMIC
        if self.projector_type in TILED_TYPES and self.longest_edge > 0:
            return Resolution.TILES
        return Resolution.FIXED

    @property
    def token_limits(self) -> tuple[int, int]:
        """The projector's own (min, max) image tokens; fixed-size ones have one count."""
        if self.resolution is Resolution.DYNAMIC:
            return DYNAMIC_TOKEN_LIMITS[self.projector_type]
        per_tile = self.patches_per_tile // self.merge**2
        return per_tile, per_tile

    @property
    def patches_per_tile(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def non_causal(self) -> bool:
        return self.projector_type in NON_CAUSAL_TYPES

    @property
    def align_px(self) -> int:
        return self.patch_size * self.merge


def qwen_vl_tensors(
    width: int, n_layer: int, ffn: int, patch: int, merge: int, out_dim: int
) -> list[tuple[str, tuple[int, ...], gguf.GGMLQuantizationType]]:
    """A Qwen2-VL-layout projector's tensors as an F16 mmproj holds them (numpy order)."""
    f16, f32 = gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32
    merged = width * merge * merge
    tensors: list[tuple[str, tuple[int, ...], gguf.GGMLQuantizationType]] = [
        ("v.patch_embd.weight", (width, 3, patch, patch), f16),  # the temporal conv, split
        ("v.patch_embd.weight.1", (width, 3, patch, patch), f16),
    ]
    for i in range(n_layer):
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensors += [(f"v.blk.{i}.{name}.weight", (width, width), f16)]
            tensors += [(f"v.blk.{i}.{name}.bias", (width,), f32)]
        tensors += [
            (f"v.blk.{i}.ln1.weight", (width,), f32),
            (f"v.blk.{i}.ln2.weight", (width,), f32),
        ]
        for name in ("ffn_up", "ffn_gate"):
            tensors += [(f"v.blk.{i}.{name}.weight", (ffn, width), f16)]
            tensors += [(f"v.blk.{i}.{name}.bias", (ffn,), f32)]
        tensors += [(f"v.blk.{i}.ffn_down.weight", (width, ffn), f16)]
        tensors += [(f"v.blk.{i}.ffn_down.bias", (width,), f32)]
    return tensors + [
        ("v.post_ln.weight", (width,), f32),
        ("mm.0.weight", (merged, merged), f16),
        ("mm.0.bias", (merged,), f32),
        ("mm.2.weight", (out_dim, merged), f16),
        ("mm.2.bias", (out_dim,), f32),
    ]


def qwen_vl_f16_bytes(
    width: int, n_layer: int, ffn: int, patch: int, merge: int, out_dim: int
) -> int:
    """Tensor bytes of a Qwen2-VL-layout projector in F16 (norms and biases F32)."""
    tensors = qwen_vl_tensors(width, n_layer, ffn, patch, merge, out_dim)
    return sum(math.prod(shape) * TENSOR_TYPE_BYTES[kind] for _name, shape, kind in tensors)


TENSOR_TYPE_BYTES = {gguf.GGMLQuantizationType.F16: 2, gguf.GGMLQuantizationType.F32: 4}


# Qwen2.5-VL-7B's vision tower as its F16 mmproj describes it (1.35 GB), for benchmarks.
QWEN25_VL_7B = ProjectorFacts(
    projector_type="qwen2.5vl_merger", width=1280, n_layer=32, n_head=16, ffn=3420,
    patch_size=14, merge=2, image_size=560, out_dim=3584,
    weights_bytes=qwen_vl_f16_bytes(1280, 32, 3420, 14, 2, 3584),
    window_pattern=8, name="Qwen2.5-VL-7B vision (described)",
)  # fmt: skip


def projector_facts(path: str | os.PathLike[str]) -> ProjectorFacts:
    """Read an mmproj GGUF's vision facts; ModelFileError if it is not a vision projector."""
    with without_cyclic_gc():
        reader = open_gguf(path)
        arch = field_value(reader, "general.architecture")
        if arch != VISION_ARCHITECTURE or not field_value(reader, "clip.has_vision_encoder"):
            raise ModelFileError(f"{path}: not a vision projector (mmproj) file")
        kind = field_value(reader, "clip.vision.projector_type")
        kind = str(kind or field_value(reader, "clip.projector_type") or "unknown")
        if kind == "qwen2.5o":  # the omni model's vision half (clip.cpp)
            kind = "qwen2.5vl_merger"

        def number(key: str, default: int = 0) -> int:
            value = field_value(reader, f"clip.vision.{key}")
            if value is None:
                return default
            if not isinstance(value, (int, float)):
                raise ModelFileError(f"{path}: clip.vision.{key} is not a number")
            return int(value)

        merge_key = "spatial_merge_size" if kind in QWEN_VL_TYPES else "projector.scale_factor"
        facts = ProjectorFacts(
            projector_type=kind,
            width=number("embedding_length"),
            n_layer=number("block_count"),
            n_head=number("attention.head_count", 1),
            ffn=number("feed_forward_length"),
            patch_size=number("patch_size", 14),
            merge=number(merge_key, DEFAULT_MERGE.get(kind, 1)),
            image_size=number("image_size"),
            out_dim=number("projection_dim"),
            weights_bytes=sum(
                int(t.n_bytes) for t in reader.tensors if t.name.startswith(("v.", "mm."))
            ),
            window_pattern=number("n_wa_pattern"),
            longest_edge=number("preproc_image_size"),
            name=str(field_value(reader, "general.name", os.path.basename(path))),
        )
    if min(facts.width, facts.n_layer, facts.patch_size, facts.merge) < 1:
        raise ModelFileError(f"{path}: the projector lacks its vision encoder's shape keys")
    return facts
