"""VLMOpt planning: where the vision encoder runs and how large an image may be, from the budget.

Given the language model's plan, the projector's facts, the profile and an
image size, `plan_vision` predicts the device memory of encoding the image and
of evaluating its tokens, and chooses the `VisionOptions` the runtime applies:

- encoder weights on the GPU only when some arrangement fits the budget, else
  on the CPU (and a machine without a GPU runs everything on the CPU);
- flash attention where the backend has a kernel for the encoder's head size;
- overlap avoidance: when the encoder and the language model do not fit
  together, the vision context is freed after encoding (the embeddings stay in
  host memory) and either the language model's resident set steps aside while
  encoding and is re-uploaded afterwards (peak = the larger of the two), or it
  is made smaller so that both fit (peak = their sum, within the budget) -
  whichever costs less time: re-uploading the resident weights and the KV cache
  (saved to host and back: 2x its bytes) at the profile's pinned host-to-device
  bandwidth, per image, against the slower decode of an answer (answer_tokens)
  and prefill of the image tokens the cost model predicts for the smaller set;
- for dynamic-resolution projectors (Qwen2-VL family), the largest image token
  budget (mtmd image_max_tokens) that fits, and the image downscaled to match.

Memory formulas (bytes; n = patches the encoder sees in one pass, d = vision
width, f = FFN width, H = heads, p = patch size), from llama.cpp's clip graph
(tools/mtmd) and ggml-alloc, which reuses a tensor's memory once its last
consumer ran, so the compute buffer is the live set of the worst moment:

- weights: the projector's tensor bytes (F16 as shipped);
- without flash attention every layer materialises the attention scores
  KQ = 4 * H * n^2 (f32; soft_max runs in place), and llama.cpp implements
  Qwen2.5-VL's window attention as full attention under an n x n f32 mask
  (4 * n^2, alive through all layers), so window layers save no memory;
  buffer = max(4Hn^2 + 4n^2 + n(20d + 12p^2), 4n^2 + n(12f + 22d + 12p^2));
- with flash attention no score matrix exists; the mask is cast once to f16
  (6 n^2 while both copies live) and copied per window layer (4 n^2):
  buffer = max(6n^2 + n(16d + 12p^2), 2n^2 + n(12f + 22d + 12p^2)); without a
  window mask the n^2 terms vanish.
  Here 12p^2 is the f32 RGB input per patch and the d/f terms the residual,
  Q, K, V and FFN activations alive at the time.
- Calibrated against clip's own "compute buffer size" report (CPU backend, the
  same allocator as CUDA) for the Qwen2.5-VL-7B shape (a projector written by
  `write_shape_only_projector`) at 2116, 8464 and 16384 patches: 346.8, 4871.6
  and 17845.0 MiB without flash attention (the formula: within 0.1%), 144.2,
  704.8 and 1893.0 MiB with it (the formula: 0.02% below to 6% above); the
  weights, 1291.4 MiB, exactly. CUDA-only temporaries (cuBLAS workspace,
  flash-attention fix-up) fall in the margin.
- mtmd runs no warmup pass here (engine/mtmd_context sets warmup = false), so
  the buffer is sized by the first real image, not by mtmd's warmup image.
- language side: the plan's weights + KV cache + compute buffer; projectors
  whose image tokens attend non-causally (Gemma 3) need the whole image in one
  ubatch, whose compute buffer the planner's formula sizes. The embeddings wait
  in host memory: tokens x output width x 4 bytes.

Peaks are allocated bytes, margins excluded; the budget checks add the planner's
margin. "Without VLMOpt" is the paper's baseline, plain llama.cpp as it was: the
encoder on the GPU beside the whole plan and kept there, no flash attention, the
projector's own token limits (today's mtmd default, flash_attn auto, would turn
flash attention on where the backend has it).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

import gguf
import numpy as np

from engine.errors import ModelFileError
from engine.gguf_file import field_value, open_gguf, without_cyclic_gc
from engine.inventory import VISION_ARCHITECTURE, ModelInventory
from engine.plan import Plan
from engine.planner import make_plan
from engine.profile import Profile
from engine.vision_options import NO_TOKEN_LIMIT, VisionOptions
from engine.vram_account import compute_bytes as language_compute_bytes
from engine.vram_account import margin_bytes

F32 = 4
GIB = 1 << 30
QWEN_VL_TYPES = frozenset({"qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger"})
# llama.cpp's own image token limits for dynamic-resolution projectors (clip.cpp).
DYNAMIC_TOKEN_LIMITS = dict.fromkeys(QWEN_VL_TYPES, (8, 4096))
DEFAULT_MERGE = {**dict.fromkeys(QWEN_VL_TYPES, 2), "gemma3": 4}
TILED_TYPES = frozenset({"idefics3"})
NON_CAUSAL_TYPES = frozenset({"gemma3"})  # mtmd_decode_use_non_causal
# Head sizes ggml-cuda's flash attention has kernels for (K and V of equal size, fattn.cu).
CUDA_FLASH_ATTENTION_HEAD_DIMS = frozenset({40, 64, 72, 80, 96, 112, 128, 256})
TEXT_ROOM_TOKENS = 512  # context left for the question and the answer beside an image
DEFAULT_ANSWER_TOKENS = 256  # the answer a smaller resident set is costed for


class Resolution(str, Enum):
    DYNAMIC = "dynamic"  # any size, aligned to patch x merge, within token limits
    FIXED = "fixed"  # always resized to image_size x image_size
    TILES = "tiles"  # resized to a longest edge, cut into image_size tiles + an overview


class ResidentSet(str, Enum):
    """What happens to the language model's resident set while an image is encoded."""

    KEPT = "kept"  # untouched: the encoder fits beside it, or runs on the CPU
    RESTORED = "restored"  # steps aside while encoding, re-uploaded before decoding
    SHRUNK = "shrunk"  # a smaller resident set that leaves room for the encoder


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
    return sum(math.prod(shape) * _TYPE_BYTES[kind] for _name, shape, kind in tensors)


_TYPE_BYTES = {gguf.GGMLQuantizationType.F16: 2, gguf.GGMLQuantizationType.F32: 4}


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


def write_shape_only_projector(path: str | os.PathLike[str], facts: ProjectorFacts) -> Path:
    """A Qwen2-VL-layout mmproj GGUF with the facts' keys and tensor table and no weights.

    The tensor data is a hole in a sparse file, as engine.synthetic does for
    language models: a 1.35 GB projector costs no disk, and llama.cpp's clip
    loads it (computing on zeros). Tests and the CLI read it back with
    `projector_facts`.
    """
    if facts.projector_type not in QWEN_VL_TYPES:
        raise ValueError(
            f"only Qwen2-VL-layout projectors can be written, not {facts.projector_type}"
        )
    path = Path(path)
    writer = gguf.GGUFWriter(path, VISION_ARCHITECTURE)
    try:
        writer.add_name(facts.name or path.stem)
        writer.add_string("clip.projector_type", facts.projector_type)
        writer.add_bool("clip.has_vision_encoder", True)
        writer.add_bool("clip.use_silu", True)
        for key, value in (
            ("image_size", facts.image_size), ("patch_size", facts.patch_size),
            ("embedding_length", facts.width), ("feed_forward_length", facts.ffn),
            ("block_count", facts.n_layer), ("attention.head_count", facts.n_head),
            ("projection_dim", facts.out_dim), ("spatial_merge_size", facts.merge),
        ):  # fmt: skip
            writer.add_uint32(f"clip.vision.{key}", value)
        if facts.window_pattern:
            writer.add_uint32("clip.vision.n_wa_pattern", facts.window_pattern)
        writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
        writer.add_array("clip.vision.image_mean", [0.48145466, 0.4578275, 0.40821073])
        writer.add_array("clip.vision.image_std", [0.26862954, 0.26130258, 0.27577711])
        sizes = []
        shape_args = (facts.width, facts.n_layer, facts.ffn, facts.patch_size, facts.merge)
        for name, shape, kind in qwen_vl_tensors(*shape_args, facts.out_dim):
            n_bytes = math.prod(shape) * _TYPE_BYTES[kind]
            dtype = np.float16 if kind is gguf.GGMLQuantizationType.F16 else np.float32
            writer.add_tensor_info(name, shape, np.dtype(dtype), n_bytes)
            sizes.append(n_bytes)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        if not writer.fout:
            raise RuntimeError("the GGUF writer has no open file to leave room in")
        out = writer.fout[0]
        out.flush()
        align = writer.data_alignment
        start = gguf.GGUFWriter.ggml_pad(out.tell(), align)
        out.truncate(start + sum(gguf.GGUFWriter.ggml_pad(n, align) for n in sizes))
    finally:
        writer.close()
    return path


# --- image geometry ---


@dataclass(frozen=True)
class ImageGeometry:
    """What one image becomes: the pixels the encoder sees and the tokens the LM evaluates."""

    input_width: int
    input_height: int
    width: int
    height: int
    n_tokens: int
    patches_per_pass: int  # the encoder's sequence length (one tile for tiled projectors)
    n_passes: int = 1

    @property
    def resolution(self) -> str:
        return f"{self.width}x{self.height}"

    @property
    def long_side(self) -> int:
        return max(self.width, self.height)


def image_geometry(
    facts: ProjectorFacts,
    width: int,
    height: int,
    max_tokens: int = NO_TOKEN_LIMIT,
    min_tokens: int = NO_TOKEN_LIMIT,
) -> ImageGeometry:
    """The effective resolution and token count mtmd's preprocessor gives this image."""
    if width < 1 or height < 1:
        raise ValueError("an image has at least one pixel per side")
    if facts.resolution is Resolution.DYNAMIC:
        low, high = facts.token_limits
        high = max_tokens if max_tokens > 0 else high
        low = min(min_tokens if min_tokens > 0 else low, high)
        align = facts.align_px
        w, h = _smart_resize(width, height, align, low * align * align, high * align * align)
        tokens = (w // align) * (h // align)
        return ImageGeometry(width, height, w, h, tokens, tokens * facts.merge**2)
    tile_tokens = facts.token_limits[0]
    if facts.resolution is Resolution.TILES:
        edge = facts.longest_edge  # mtmd resizes the longer side to it, up or down
        if width >= height:
            w, h = edge, int(edge / (width / height))
            h += h % 2
        else:
            w, h = int(edge * (width / height)), edge
            w += w % 2
        tiles = math.ceil(w / facts.image_size) * math.ceil(h / facts.image_size)
        passes = tiles + 1  # and an overview of the whole image
        return ImageGeometry(
            width, height, w, h, passes * tile_tokens, facts.patches_per_tile, passes
        )
    size = facts.image_size
    return ImageGeometry(width, height, size, size, tile_tokens, facts.patches_per_tile)


def _smart_resize(
    width: int, height: int, align: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """clip's calc_size_preserved_ratio, in its float32 arithmetic (the rounding matters)."""
    f = np.float32
    step = f(align)

    def round_by(x: float) -> int:
        return int(math.floor(float(f(x) / step) + 0.5)) * align

    w_bar, h_bar = max(align, round_by(width)), max(align, round_by(height))
    if max_pixels > 0 and w_bar * h_bar > max_pixels:
        beta = np.sqrt(f(height) * f(width) / f(max_pixels))
        h_bar = max(align, math.floor(float(f(f(height) / beta) / step)) * align)
        w_bar = max(align, math.floor(float(f(f(width) / beta) / step)) * align)
    elif min_pixels > 0 and w_bar * h_bar < min_pixels:
        beta = np.sqrt(f(min_pixels) / (f(height) * f(width)))
        h_bar = math.ceil(float(f(f(height) * beta) / step)) * align
        w_bar = math.ceil(float(f(f(width) * beta) / step)) * align
    return int(w_bar), int(h_bar)


# --- memory ---


@dataclass(frozen=True)
class VisionMemory:
    """The encoder's device bytes for one pass of n_patches: weights and compute buffer."""

    weights_bytes: int
    attention_scores_bytes: int  # the f32 KQ matrix of one layer; 0 with flash attention
    mask_bytes: int  # the window-attention mask copies alive at the worst moment
    activations_bytes: int  # everything linear in n_patches at that moment
    n_patches: int
    flash_attention: bool

    @property
    def compute_bytes(self) -> int:
        return self.attention_scores_bytes + self.mask_bytes + self.activations_bytes

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.compute_bytes


def vision_memory(facts: ProjectorFacts, n_patches: int, flash_attention: bool) -> VisionMemory:
    """Weights plus clip's compute buffer for a pass of n_patches (the formulas above)."""
    n, d, p = n_patches, facts.width, facts.patch_size
    pixels = 12 * p * p  # f32 RGB input per patch
    ffn_phase = n * (12 * facts.ffn + 22 * d + pixels)
    square = n * n
    masked = facts.window_pattern > 0
    if flash_attention:
        phases = [
            (0, 6 * square if masked else 0, n * (16 * d + pixels)),
            (0, 2 * square if masked else 0, ffn_phase),
        ]
    else:
        scores = F32 * facts.n_head * square
        mask = F32 * square if masked else 0
        phases = [(scores, mask, n * (20 * d + pixels)), (0, mask, ffn_phase)]
    scores, mask, activations = max(phases, key=sum)
    return VisionMemory(facts.weights_bytes, scores, mask, activations, n, flash_attention)


def language_image_bytes(
    plan: Plan, inventory: ModelInventory, n_tokens: int, non_causal: bool
) -> int:
    """The language model's device bytes while it evaluates n_tokens image embeddings.

    Weights, KV cache and the compute buffer of the plan; a non-causal projector
    needs the whole image in one ubatch, so its compute buffer grows to that size.
    An embeddings batch (ubatch x width f32) takes the place of the token lookup's
    output of the same size, so a causal image costs nothing beyond the plan.
    """
    account = plan.vram
    if account.total_bytes == 0:
        return 0  # a CPU-only plan keeps nothing on the device
    compute = account.compute_bytes
    if non_causal and n_tokens > plan.n_ubatch:
        bigger = language_compute_bytes(inventory, plan.request, n_tokens)
        compute += bigger - language_compute_bytes(inventory, plan.request, plan.n_ubatch)
    return account.weights_bytes + account.kv_cache_bytes + compute


def flash_attention_supported(profile: Profile, facts: ProjectorFacts) -> bool:
    """ggml's CPU backend runs flash attention at any head size; CUDA has kernels for a few."""
    return profile.gpu is None or facts.head_dim in CUDA_FLASH_ATTENTION_HEAD_DIMS


# --- the plan ---


@dataclass(frozen=True)
class VisionPlan:
    """The VLMOpt choices for one image size, and what they predict."""

    options: VisionOptions
    projector: ProjectorFacts
    image: ImageGeometry  # under the options
    full_image: ImageGeometry  # at the projector's own limits: plain llama.cpp
    resident_set: ResidentSet
    language_plan: Plan  # the plan to run: the given one, or the smaller one chosen
    vision: VisionMemory  # with VLMOpt
    vision_without: VisionMemory  # no flash attention, full-resolution tokens
    peak_bytes: int  # predicted peak device bytes with VLMOpt
    peak_without_bytes: int  # encoder and language model resident together, plain llama.cpp
    encode_bytes: int  # device bytes while encoding (with VLMOpt)
    decode_bytes: int  # device bytes while evaluating the image tokens and decoding
    budget_bytes: int
    host_embedding_bytes: int
    restore_s: float | None = None  # per image turn, when weighed
    shrink_s: float | None = None
    reasons: tuple[str, ...] = ()

    @property
    def effective_resolution(self) -> str:
        return self.image.resolution

    @property
    def n_tokens(self) -> int:
        return self.image.n_tokens

    @property
    def saving(self) -> float | None:
        """Peak without VLMOpt over peak with it (None where nothing is on the device)."""
        return self.peak_without_bytes / self.peak_bytes if self.peak_bytes > 0 else None

    def describe(self) -> str:
        return "\n".join([self.options.describe(), *self.reasons])


def plan_vision(
    plan: Plan,
    inventory: ModelInventory,
    facts: ProjectorFacts,
    profile: Profile,
    budget_bytes: int | None = None,
    image_size: tuple[int, int] | None = None,
    *,
    answer_tokens: int = DEFAULT_ANSWER_TOKENS,
    can_step_aside: bool = True,
) -> VisionPlan:
    """Choose the VLMOpt options for an image of image_size (w, h) under the budget.

    budget_bytes defaults to the plan's budget (another budget re-plans the
    language model for it). image_size defaults to the largest image the
    projector accepts by itself, so the options hold for any image. With
    can_step_aside=False the language model's resident set is never evicted
    (for a runtime that cannot re-upload it); a smaller one may still be chosen.
    """
    if facts.out_dim and inventory.n_embd and facts.out_dim != inventory.n_embd:
        raise ValueError(
            f"the projector makes {facts.out_dim}-wide embeddings but {inventory.name} takes "
            f"{inventory.n_embd}: it belongs to another model"
        )
    budget = plan.request.vram_budget_bytes if budget_bytes is None else budget_bytes
    if budget != plan.request.vram_budget_bytes:
        plan = make_plan(inventory, profile, replace(plan.request, vram_budget_bytes=budget))
    width, height = image_size or _largest_default_image(facts)
    full = image_geometry(facts, width, height)
    vision_without = vision_memory(facts, full.patches_per_pass, flash_attention=False)
    language_full = language_image_bytes(plan, inventory, full.n_tokens, facts.non_causal)
    common = _Common(plan, inventory, facts, profile, budget, width, height, full)
    if profile.gpu is None:
        chosen = _on_cpu(common, "no GPU in the profile: the vision encoder runs on the CPU")
    else:
        chosen = _on_gpu(common, answer_tokens, can_step_aside)
    peak_without = 0 if profile.gpu is None else language_full + vision_without.total_bytes
    return VisionPlan(
        options=chosen.options,
        projector=facts,
        image=chosen.image,
        full_image=full,
        resident_set=chosen.resident_set,
        language_plan=chosen.language_plan,
        vision=chosen.vision,
        vision_without=vision_without,
        peak_bytes=max(chosen.encode_bytes, chosen.decode_bytes),
        peak_without_bytes=peak_without,
        encode_bytes=chosen.encode_bytes,
        decode_bytes=chosen.decode_bytes,
        budget_bytes=budget,
        host_embedding_bytes=chosen.image.n_tokens * facts.out_dim * F32,
        restore_s=chosen.restore_s,
        shrink_s=chosen.shrink_s,
        reasons=tuple(chosen.reasons),
    )


@dataclass(frozen=True)
class _Common:
    plan: Plan
    inventory: ModelInventory
    facts: ProjectorFacts
    profile: Profile
    budget: int
    width: int
    height: int
    full: ImageGeometry

    @property
    def context_cap(self) -> int:
        """Image tokens that leave room for the question and answer in the context window."""
        n_ctx = self.plan.request.n_ctx
        return max(n_ctx - TEXT_ROOM_TOKENS, n_ctx // 2)

    def language_bytes(self, tokens: int, plan: Plan | None = None) -> int:
        return language_image_bytes(
            plan or self.plan, self.inventory, tokens, self.facts.non_causal
        )


@dataclass
class _Choice:
    options: VisionOptions
    image: ImageGeometry
    vision: VisionMemory
    resident_set: ResidentSet
    language_plan: Plan
    encode_bytes: int
    decode_bytes: int
    reasons: list[str]
    restore_s: float | None = None
    shrink_s: float | None = None


def _largest_default_image(facts: ProjectorFacts) -> tuple[int, int]:
    if facts.resolution is Resolution.DYNAMIC:
        side = math.isqrt(facts.token_limits[1]) * facts.align_px
        return side, side
    if facts.resolution is Resolution.TILES:
        return facts.longest_edge, facts.longest_edge
    return facts.image_size, facts.image_size


def _on_cpu(c: _Common, why: str) -> _Choice:
    """The encoder in host memory: no VRAM, the language model's plan untouched."""
    image = _context_capped(c)
    flash = True  # ggml's CPU backend has flash attention at every head size
    vision = vision_memory(c.facts, image.patches_per_pass, flash)
    language = c.language_bytes(image.n_tokens)
    options = VisionOptions(
        encoder_on_gpu=False,
        flash_attention=flash,
        free_after_encode=False,
        image_max_tokens=_cap_option(c, c.context_cap),
        max_side_px=_downscale_px(c, image),
        reason=why,
    )
    reasons = [
        why,
        f"host memory for encoding: {_gib(vision.total_bytes)} (flash attention: "
        f"{'yes' if flash else 'no'})",
        _tokens_line(c, image, _limit_cause(c, image, c.context_cap, "")),
    ]
    return _Choice(options, image, vision, ResidentSet.KEPT, c.plan, language, language, reasons)


def _on_gpu(c: _Common, answer_tokens: int, can_step_aside: bool) -> _Choice:
    flash = flash_attention_supported(c.profile, c.facts)
    margin = margin_bytes(c.budget)
    cap = c.context_cap
    language = c.language_bytes(c.full.n_tokens)
    # 1. beside the whole resident set
    together = _largest_tokens(c, c.budget - margin - language, flash, cap)
    image = _limited(c, together, cap)
    if together is not None and image.n_tokens >= _context_capped(c).n_tokens:
        return _together(c, image, flash, together, language)
    # 2. alone on the device (the encoder's weights must fit the budget at its smallest)
    alone = _largest_tokens(c, c.budget - margin, flash, cap)
    if alone is None:
        smallest = _smallest_vision(c, flash)
        return _on_cpu(
            c,
            f"the vision encoder needs {_gib(smallest)} at its smallest image, more than the "
            f"{_gib(c.budget - margin)} the budget leaves: it runs on the CPU",
        )
    image = _limited(c, alone, cap)
    vision = vision_memory(c.facts, image.patches_per_pass, flash)
    restore = _restore_choice(c, image, vision, flash, alone)
    shrink = _shrink_choice(c, image, vision, flash, answer_tokens)
    if can_step_aside and (
        shrink is None or _seconds(restore.restore_s) <= _seconds(shrink.shrink_s)
    ):
        chosen = restore
    elif shrink is not None:
        chosen = shrink
    else:
        return _on_cpu(
            c,
            "the encoder fits only while the language model steps aside, which this runtime "
            "cannot do: it runs on the CPU",
        )
    chosen.restore_s = restore.restore_s
    chosen.shrink_s = shrink.shrink_s if shrink is not None else None
    chosen.reasons.append(_weighing_line(chosen, restore, shrink, answer_tokens, can_step_aside))
    return chosen


def _together(c: _Common, image: ImageGeometry, flash: bool, limit: int, language: int) -> _Choice:
    vision = vision_memory(c.facts, image.patches_per_pass, flash)
    peak = language + vision.total_bytes
    options = VisionOptions(
        encoder_on_gpu=True,
        flash_attention=flash,
        free_after_encode=False,
        image_min_tokens=_min_option(c, limit),
        image_max_tokens=_cap_option(c, limit),
        max_side_px=_downscale_px(c, image),
        reason="the encoder fits beside the language model's resident set",
    )
    reasons = [
        f"vision encoder on the GPU beside the language model: {_gib(vision.total_bytes)} + "
        f"{_gib(language)} fit the {_gib(c.budget)} budget with its margin",
        _flash_line(c, image, flash),
        "no overlap avoidance needed: the encoder stays loaded between images",
        _tokens_line(c, image, _limit_cause(c, image, limit, "beside the language model")),
    ]
    return _Choice(options, image, vision, ResidentSet.KEPT, c.plan, peak, peak, reasons)


def _seconds(weighed: float | None) -> float:
    """A weighed choice's time; one never weighed loses every comparison."""
    return math.inf if weighed is None else weighed


def _restore_choice(
    c: _Common, image: ImageGeometry, vision: VisionMemory, flash: bool, limit: int
) -> _Choice:
    """The resident set steps aside while encoding; re-uploaded over PCIe before decoding."""
    account = c.plan.vram
    moved = account.weights_bytes + 2 * account.kv_cache_bytes  # KV saved to host and back
    gpu = c.profile.gpu
    assert gpu is not None
    seconds = moved / (gpu.h2d_pinned_gbps * 1e9)
    language = c.language_bytes(image.n_tokens)
    options = VisionOptions(
        encoder_on_gpu=True,
        flash_attention=flash,
        free_after_encode=True,
        image_min_tokens=_min_option(c, limit),
        image_max_tokens=_cap_option(c, limit),
        max_side_px=_downscale_px(c, image),
        language_steps_aside=True,
        reason="the encoder and the language model take turns on the GPU",
    )
    reasons = [
        f"vision encoder on the GPU, alone: {_gib(vision.total_bytes)} of the "
        f"{_gib(c.budget)} budget while encoding",
        _flash_line(c, image, flash),
        f"overlap avoidance: encode, keep the embeddings in host memory, free the vision context, "
        f"then decode; peak {_gib(max(vision.total_bytes, language))} = the larger of "
        f"{_gib(vision.total_bytes)} (vision) and {_gib(language)} (language), not their sum",
        _tokens_line(c, image, _limit_cause(c, image, limit, "alone on the GPU")),
    ]
    return _Choice(
        options, image, vision, ResidentSet.RESTORED, c.plan, vision.total_bytes, language,
        reasons, restore_s=seconds,
    )  # fmt: skip


def _shrink_choice(
    c: _Common, image: ImageGeometry, vision: VisionMemory, flash: bool, answer_tokens: int
) -> _Choice | None:
    """A smaller resident set that leaves the encoder room; None if nothing is left for it."""
    account = c.plan.vram
    extra = c.language_bytes(image.n_tokens) - (
        account.weights_bytes + account.kv_cache_bytes + account.compute_bytes
    )  # beyond the plan's own account: a non-causal image's bigger ubatch
    room = c.budget - vision.total_bytes - max(extra, 0)
    if room <= 0:
        return None
    request = replace(c.plan.request, vram_budget_bytes=room)
    smaller = make_plan(c.inventory, c.profile, request)
    language = c.language_bytes(image.n_tokens, smaller)
    full, small = c.plan, smaller
    per_token = full.request.prompt_tokens
    slower = (
        answer_tokens
        * (1 / small.predicted_decode_tokens_per_s - 1 / full.predicted_decode_tokens_per_s)
        + image.n_tokens * (small.predicted_ttft_s - full.predicted_ttft_s) / per_token
    )
    options = VisionOptions(
        encoder_on_gpu=True,
        flash_attention=flash,
        free_after_encode=True,
        image_min_tokens=_min_option(c, image.n_tokens),
        image_max_tokens=_cap_option(c, image.n_tokens),
        max_side_px=_downscale_px(c, image),
        reason="a smaller resident set leaves the encoder room",
    )
    reasons = [
        f"vision encoder on the GPU beside a smaller resident set: {_gib(vision.total_bytes)} + "
        f"{_gib(language)} ({len(smaller.resident)} of the plan's {len(full.resident)} "
        "sub-layers resident)",
        _flash_line(c, image, flash),
        "the vision context is freed after encoding; the embeddings wait in host memory",
        _tokens_line(c, image, _limit_cause(c, image, image.n_tokens, "beside the smaller set")),
    ]
    peak = vision.total_bytes + language
    return _Choice(
        options, image, vision, ResidentSet.SHRUNK, smaller, peak, language, reasons,
        shrink_s=max(slower, 0.0),
    )  # fmt: skip


def _weighing_line(
    chosen: _Choice,
    restore: _Choice,
    shrink: _Choice | None,
    answer_tokens: int,
    can_step_aside: bool,
) -> str:
    upload = f"re-uploading the resident set costs {restore.restore_s:.2f} s per image"
    if shrink is None:
        return f"resident set restored after encoding ({upload}); no smaller set leaves room"
    small = shrink.language_plan
    full = restore.language_plan
    slower = (
        f"a smaller resident set costs {shrink.shrink_s:.2f} s per {answer_tokens}-token answer "
        f"({small.predicted_decode_tokens_per_s:.1f} instead of "
        f"{full.predicted_decode_tokens_per_s:.1f} tokens/s)"
    )
    if chosen is restore:
        return f"resident set restored after encoding: {upload}, less than {slower}"
    if not can_step_aside:
        return f"resident set shrunk: {slower}; this runtime cannot step aside"
    return f"resident set shrunk: {slower}, less than {upload}"


# --- helpers ---


def _largest_tokens(c: _Common, room: int, flash: bool, cap: int) -> int | None:
    """The most image tokens whose encoder fits `room` bytes; None if even the fewest do not."""
    facts = c.facts
    low, high = facts.token_limits
    if facts.resolution is not Resolution.DYNAMIC:
        one_tile_fits = vision_memory(facts, facts.patches_per_tile, flash).total_bytes <= room
        return high if one_tile_fits else None
    high = min(high, max(cap, low))

    def fits(tokens: int) -> bool:
        return vision_memory(facts, tokens * facts.merge**2, flash).total_bytes <= room

    if not fits(low):
        return None
    while low < high:  # the largest fitting count; memory only grows with tokens
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def _limited(c: _Common, limit: int | None, cap: int) -> ImageGeometry:
    if c.facts.resolution is not Resolution.DYNAMIC:
        return c.full
    own = c.facts.token_limits[1]
    tokens = min(own if limit is None else limit, own, cap)
    return image_geometry(c.facts, c.width, c.height, max_tokens=tokens)


def _context_capped(c: _Common) -> ImageGeometry:
    return _limited(c, None, c.context_cap)


def _smallest_vision(c: _Common, flash: bool) -> int:
    facts = c.facts
    low = facts.token_limits[0]
    patches = low * facts.merge**2 if facts.resolution is Resolution.DYNAMIC else None
    return vision_memory(facts, patches or facts.patches_per_tile, flash).total_bytes


def _cap_option(c: _Common, limit: int) -> int:
    """image_max_tokens: only for dynamic projectors, only below their own limit."""
    if c.facts.resolution is not Resolution.DYNAMIC:
        return NO_TOKEN_LIMIT
    limit = min(limit, c.context_cap)
    return limit if limit < c.facts.token_limits[1] else NO_TOKEN_LIMIT


def _min_option(c: _Common, limit: int) -> int:
    """image_min_tokens follows a cap below the projector's own minimum (mtmd needs min <= max)."""
    if c.facts.resolution is not Resolution.DYNAMIC:
        return NO_TOKEN_LIMIT
    own_min = c.facts.token_limits[0]
    return limit if limit < own_min else NO_TOKEN_LIMIT


def _downscale_px(c: _Common, image: ImageGeometry) -> int:
    """max_side_px: the effective long side when the plan shrinks a dynamic image below it."""
    if c.facts.resolution is not Resolution.DYNAMIC or image.n_tokens >= c.full.n_tokens:
        return 0
    return image.long_side


def _limit_cause(c: _Common, image: ImageGeometry, limit: int, where: str) -> str:
    """Why this image was downscaled, or why larger ones would be."""
    if c.facts.resolution is not Resolution.DYNAMIC:
        return ""
    limit = min(limit, c.context_cap)
    cause = "the context window" if limit >= c.context_cap else f"what fits {where}"
    if image.n_tokens < c.full.n_tokens:
        return cause
    if limit < c.facts.token_limits[1]:
        return f"larger images capped at {limit} tokens: {cause}"
    return ""


def _tokens_line(c: _Common, image: ImageGeometry, cause: str) -> str:
    full = c.full
    head = f"image {image.input_width}x{image.input_height}"
    if c.facts.resolution is Resolution.TILES:
        body = (
            f"{image.n_passes - 1} tiles + overview at {image.resolution}, {image.n_tokens} tokens"
        )
    elif image.n_tokens < full.n_tokens:
        body = (
            f"downscaled to {image.resolution}, {image.n_tokens} tokens instead of "
            f"{full.n_tokens} at {full.resolution}"
        )
    else:
        body = f"encoded at {image.resolution}, {image.n_tokens} tokens"
    line = f"{head}: {body}"
    if cause:
        line += f" ({cause})"
    if image.n_tokens > c.context_cap:
        line += f"; more than the {c.plan.request.n_ctx}-token context can hold with a question"
    return line


def _flash_line(c: _Common, image: ImageGeometry, flash: bool) -> str:
    if not flash:
        return (
            f"no flash attention: CUDA has no kernel for the encoder's head size {c.facts.head_dim}"
        )
    scores = vision_memory(c.facts, image.patches_per_pass, False).attention_scores_bytes
    return f"flash attention in the encoder: no {_gib(scores)} attention-score matrix per layer"


def _gib(n_bytes: int | float) -> str:
    return f"{n_bytes / GIB:.2f} GiB"
