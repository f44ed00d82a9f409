"""Random-weight vision projectors (mmproj GGUFs), paired with synthetic language models.

The image path (load the projector with llama.cpp's mtmd, preprocess, encode,
decode the embeddings into the language model) needs a real projector file, and
real ones are hundreds of MB that our machines cannot download. A projector
written here has the keys, tensor names, shapes and types that clip.cpp reads
for its projector type, with random weights, so a tiny one loads and encodes an
image in milliseconds while going through exactly the code a real one does.

Three families, each with the language model it comes with (`language_model_for`):

- ``gemma3`` (Gemma 3, with a gemma3 model): a SigLIP ViT whose patch grid is
  average-pooled by `scale_factor` per side, then RMS-normed and projected to the
  language model's width. clip.cpp reads the pooling factor from
  ``clip.vision.projector.scale_factor`` (for llama.cpp's own tiny test model), so
  an image costs (image_size / patch_size / scale_factor)² tokens: 16 by default.
- ``idefics3`` (SmolVLM, Idefics3, with a llama model): the same SigLIP ViT, then
  a pixel shuffle (`scale_factor`² neighbouring patches concatenated) and one
  linear projection. mtmd resizes every image so its longer side is
  `longest_edge` (``clip.vision.preproc_image_size``), cuts it into image_size
  tiles and adds an overview: one image chunk per tile, with text markers
  (``<fake_token_around_image><row_1_col_1>``, ``<global-img>``) between them,
  which mtmd looks up in the model's vocabulary, so the model adds them.
- ``qwen2vl_merger`` / ``qwen2.5vl_merger`` (Qwen2-VL / Qwen2.5-VL, with a
  qwen2vl model): a ViT with 2-D rotary positions over two patch convolutions
  (Qwen's temporal pair), LayerNorm and GELU (2) or RMSNorm, SiLU gated FFN and
  windowed attention in all but every `window_pattern`-th block (2.5), then
  2x2 patches merged by an MLP. Images keep their aspect ratio at a dynamic
  resolution (multiples of 2 * patch_size, 8 to 4096 tokens unless the options
  say otherwise), and the language model places each token at (t, y, x) with M-RoPE.

mtmd refuses a projector whose output width differs from the language model's
n_embd, so `write_synthetic_vlm` writes the two together from one width.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from engine.model.synthetic import write_synthetic_model
from engine.model.synthetic_spec import SyntheticSpec

LOGGER = logging.getLogger(__name__)

_GEMMA3 = gguf.VisionProjectorType.GEMMA3
_IDEFICS3 = gguf.VisionProjectorType.IDEFICS3
_QWEN2VL = gguf.VisionProjectorType.QWEN2VL  # "qwen2vl_merger"
_QWEN25VL = gguf.VisionProjectorType.QWEN25VL  # "qwen2.5vl_merger"
PROJECTOR_TYPES: tuple[str, ...] = (_GEMMA3, _IDEFICS3, _QWEN2VL, _QWEN25VL)
CLIP_ARCHITECTURE = "clip"  # general.architecture of every mmproj file

# The language model architecture each projector comes with.
LANGUAGE_ARCHITECTURES = {
    _GEMMA3: "gemma3",
    _IDEFICS3: "llama",
    _QWEN2VL: "qwen2vl",
    _QWEN25VL: "qwen2vl",
}
# Tokens the family's tokenizer adds for its images. mtmd looks up idefics3's markers as
# single tokens (a missing one becomes token -1, and decoding fails); Qwen's are text
# it tokenizes, so they are only there to cost one token each, as in the real model.
_IDEFICS3_TOKENS = (
    "<fake_token_around_image>",
    "<image>",
    "<global-img>",
    *(f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7)),
)
_QWEN_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>")
IMAGE_TOKENS: dict[str, tuple[str, ...]] = {
    _GEMMA3: (),
    _IDEFICS3: _IDEFICS3_TOKENS,
    _QWEN2VL: _QWEN_TOKENS,
    _QWEN25VL: _QWEN_TOKENS,
}
_LOOKED_UP_TOKENS = {_IDEFICS3: ("<fake_token_around_image>", "<global-img>")}

_LAYER_NORM_EPS = 1e-6  # SigLIP's
_IMAGE_MEAN_STD = (0.5, 0.5, 0.5)  # Gemma 3's preprocessor normalises to [-1, 1]
# Qwen2-VL keeps CLIP's normalisation
_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
_QWEN_MERGE = 2  # clip.cpp's Qwen graphs merge 2x2 patches, whatever the file says
_WEIGHT_STD = 0.02
_F32 = gguf.GGMLQuantizationType.F32
_F16 = gguf.GGMLQuantizationType.F16
_T = gguf.MODEL_TENSOR


@dataclass(frozen=True)
class ProjectorSpec:
    """Hyper-parameters of a synthetic projector; defaults make a tiny one for a 64-wide LM."""

    projection_dim: int = 64  # must equal the language model's n_embd
    projector_type: str = "gemma3"  # one of PROJECTOR_TYPES
    # Gemma 3 resizes every image to this square, idefics3 cuts images into tiles of it;
    # Qwen's images keep their own size (clip.cpp only warms up at one of this size).
    image_size: int = 32
    patch_size: int = 4
    width: int = 32  # ViT embedding length
    # ViT feed-forward length. Equal to width, clip.cpp's fix for old files swaps
    # ffn_up/ffn_down (same shapes then, so harmless) and logs a warning.
    ffn: int = 64
    block_count: int = 2
    heads: int = 2
    scale_factor: int = 2  # pooling per side; real Gemma 3 uses 4. Qwen: must be 2 (merge)
    seed: int = 0
    # idefics3: images are resized so their longer side is this, then cut into
    # image_size tiles (0: 3 * image_size, so at most 3 x 3 tiles); SmolVLM uses 4 x 512.
    longest_edge: int = 0
    # qwen2.5vl: every window_pattern-th block attends to the whole image, others to windows
    window_pattern: int = 2

    def __post_init__(self) -> None:
        if self.projector_type not in PROJECTOR_TYPES:
            raise ValueError(
                f"unknown projector type {self.projector_type!r}; "
                f"supported: {', '.join(PROJECTOR_TYPES)}"
            )
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size {self.image_size} is not a multiple of {self.patch_size}")
        if self.patches_per_side % self.scale_factor:
            raise ValueError(
                f"{self.patches_per_side} patches per side do not pool evenly "
                f"by scale_factor {self.scale_factor}"
            )
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not a multiple of heads {self.heads}")
        if self.is_qwen:
            self._check_qwen()
        if self.projector_type == _IDEFICS3 and 0 < self.longest_edge < self.image_size:
            raise ValueError(
                f"longest_edge {self.longest_edge} is smaller than a tile ({self.image_size})"
            )

    def _check_qwen(self) -> None:
        if self.scale_factor != _QWEN_MERGE:
            raise ValueError("clip.cpp merges Qwen's patches 2x2: scale_factor must be 2")
        if (self.width // self.heads) % 4:
            raise ValueError(
                f"head size {self.width // self.heads} is not a multiple of 4 "
                "(the ViT's 2-D rotary sections)"
            )
        if self.projector_type == _QWEN25VL and self.window_pattern < 1:
            raise ValueError(f"window_pattern must be at least 1, not {self.window_pattern}")

    @property
    def is_qwen(self) -> bool:
        return self.projector_type in (_QWEN2VL, _QWEN25VL)

    @property
    def tile_longest_edge(self) -> int:
        """idefics3: the longer side every image is resized to before tiling."""
        return self.longest_edge or 3 * self.image_size

    @property
    def patches_per_side(self) -> int:
        return self.image_size // self.patch_size

    @property
    def n_patches(self) -> int:
        return self.patches_per_side**2

    @property
    def tokens_per_image(self) -> int:
        """Embeddings an image_size square becomes: every Gemma 3 image, each idefics3
        tile (and the overview), a Qwen image of exactly that size."""
        return (self.patches_per_side // self.scale_factor) ** 2

    @property
    def model_name(self) -> str:
        return (
            f"synthetic-mmproj-{self.projector_type}-{self.block_count}L-{self.width}d"
            f"-to-{self.projection_dim}d"
        )


@dataclass(frozen=True)
class _Tensor:
    """One tensor to write. `shape` is numpy order (GGUF lists dims reversed)."""

    name: str
    shape: tuple[int, ...]
    qtype: gguf.GGMLQuantizationType
    init: str  # "normal", "ones" or "zeros"

    @property
    def dtype(self) -> type[np.floating]:
        return np.float16 if self.qtype == _F16 else np.float32

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


# ---------------------------------------------------------------- public API


def write_synthetic_projector(path: Path, spec: ProjectorSpec) -> Path:
    """Write a random-weight mmproj GGUF for `spec` at `path` (atomically) and return the path."""
    path = Path(path)
    part = path.with_suffix(path.suffix + ".part")
    try:
        _write_gguf(part, spec, _tensor_plan(spec))
        part.replace(path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    LOGGER.info("wrote %s (%s, %d KiB)", path, spec.model_name, path.stat().st_size // 1024)
    return path


def language_model_for(projector_type: str = _GEMMA3, **overrides: Any) -> SyntheticSpec:
    """A tiny language model of the family `projector_type` comes with (64 wide unless
    `overrides` say otherwise), its tokenizer holding the family's image tokens."""
    if projector_type not in PROJECTOR_TYPES:
        raise ValueError(f"unknown projector type {projector_type!r}")
    if IMAGE_TOKENS[projector_type]:
        overrides = {"extra_tokens": IMAGE_TOKENS[projector_type], **overrides}
    return SyntheticSpec(LANGUAGE_ARCHITECTURES[projector_type], **overrides)


def write_synthetic_vlm(
    folder: Path,
    lm: SyntheticSpec | None = None,
    projector: ProjectorSpec | None = None,
    quant: str = "F16",
) -> tuple[Path, Path]:
    """Write a language model and a projector mtmd accepts (Gemma 3's unless told otherwise).

    Without `lm`, the model is `language_model_for` the projector's type (64 wide).
    The pair is what a user downloads (model + mmproj) and is named like it, so
    the model library pairs them. Returns (model path, projector path).
    """
    folder = Path(folder)
    if lm is None:
        lm = language_model_for(projector.projector_type if projector else _GEMMA3)
    projector = projector if projector is not None else ProjectorSpec(projection_dim=lm.n_embd)
    if projector.projection_dim != lm.n_embd:
        raise ValueError(
            f"projector projects to {projector.projection_dim} but the model's n_embd is "
            f"{lm.n_embd}; mtmd would refuse the pair"
        )
    looked_up = _LOOKED_UP_TOKENS.get(projector.projector_type, ())
    missing = [token for token in looked_up if token not in lm.extra_tokens]
    if missing:
        raise ValueError(
            f"the model's vocabulary lacks {', '.join(missing)}, which mtmd puts between "
            f"{projector.projector_type} tiles (see language_model_for)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    model = write_synthetic_model(folder / f"{lm.model_name}-{quant}.gguf", lm, quant)
    mmproj = write_synthetic_projector(folder / f"mmproj-{lm.model_name}-F16.gguf", projector)
    return model, mmproj


# ---------------------------------------------------------------- tensor plan


def _tensor_plan(spec: ProjectorSpec) -> list[_Tensor]:
    """Every tensor clip.cpp loads for the projector type, typed as its converter writes them."""
    if spec.is_qwen:
        return _qwen_plan(spec)
    return _siglip_plan(spec)


def _siglip_plan(spec: ProjectorSpec) -> list[_Tensor]:
    """Gemma 3 and idefics3: a SigLIP ViT, then each family's projection.

    The converters keep the embeddings (patch conv, positions) in F32; Gemma 3's
    writes the input projection in F16 (llama.cpp issue 13025); other matrices
    follow the file type (F16) and vectors stay F32.
    """
    w = spec.width
    plan = [
        _Tensor(
            _name(_T.V_ENC_EMBD_PATCH), (w, 3, spec.patch_size, spec.patch_size), _F32, "normal"
        ),
        _Tensor(_name(_T.V_ENC_EMBD_PATCH, suffix="bias"), (w,), _F32, "zeros"),
        _Tensor(_name(_T.V_ENC_EMBD_POS), (spec.n_patches, w), _F32, "normal"),
    ]
    for bid in range(spec.block_count):
        plan += _block_tensors(spec, bid)
    plan += _layer_norm(_T.V_POST_NORM, None, w)
    if spec.projector_type == _IDEFICS3:
        # the pixel shuffle concatenates scale_factor² patches; ggml sees [w * s², projection_dim]
        fc_in = w * spec.scale_factor**2
        return [*plan, _Tensor(_name(_T.V_MMPROJ_FC), (spec.projection_dim, fc_in), _F16, "normal")]
    return [
        *plan,
        _Tensor(_name(_T.V_MM_SOFT_EMB_NORM), (w,), _F32, "ones"),
        # ggml sees [projection_dim, width]: clip.cpp takes the projector's output width from ne[0]
        _Tensor(_name(_T.V_MM_INP_PROJ), (w, spec.projection_dim), _F16, "normal"),
    ]


def _qwen_plan(spec: ProjectorSpec) -> list[_Tensor]:
    """Qwen2-VL / Qwen2.5-VL: Qwen's Conv3D patch embedding split into two Conv2Ds (one per
    frame of its temporal pair, as the converter does), no patch bias and no position
    embedding (rotary), and the 2x2 merger MLP mm.0 / mm.2 (F16 weights, F32 biases)."""
    w, p = spec.width, spec.patch_size
    is_25 = spec.projector_type == _QWEN25VL
    patch = (w, 3, p, p)
    plan = [
        _Tensor(_name(_T.V_ENC_EMBD_PATCH), patch, _F16, "normal"),
        _Tensor(_name(_T.V_ENC_EMBD_PATCH, suffix="weight.1"), patch, _F16, "normal"),
    ]
    norm = _rms_norm if is_25 else _layer_norm
    for bid in range(spec.block_count):
        plan += norm(_T.V_ENC_INPUT_NORM, bid, w)
        for kind in (_T.V_ENC_ATTN_Q, _T.V_ENC_ATTN_K, _T.V_ENC_ATTN_V, _T.V_ENC_ATTN_O):
            plan += _linear(kind, bid, w, w)
        plan += norm(_T.V_ENC_POST_ATTN_NORM, bid, w)
        if is_25:  # SiLU-gated: gate and up both widen, down narrows
            plan += _linear(_T.V_ENC_FFN_GATE, bid, w, spec.ffn)
        plan += _linear(_T.V_ENC_FFN_UP, bid, w, spec.ffn)
        plan += _linear(_T.V_ENC_FFN_DOWN, bid, spec.ffn, w)
    plan += norm(_T.V_POST_NORM, None, w)  # the merger's ln_q
    merged = w * _QWEN_MERGE**2
    return [
        *plan,
        *_linear(_T.V_MMPROJ, 0, merged, merged),
        *_linear(_T.V_MMPROJ, 2, merged, spec.projection_dim),
    ]


def _block_tensors(spec: ProjectorSpec, bid: int) -> list[_Tensor]:
    w = spec.width
    tensors = _layer_norm(_T.V_ENC_INPUT_NORM, bid, w)
    for kind in (_T.V_ENC_ATTN_Q, _T.V_ENC_ATTN_K, _T.V_ENC_ATTN_V, _T.V_ENC_ATTN_O):
        tensors += _linear(kind, bid, w, w)
    tensors += _layer_norm(_T.V_ENC_POST_ATTN_NORM, bid, w)
    tensors += _linear(_T.V_ENC_FFN_UP, bid, w, spec.ffn)
    tensors += _linear(_T.V_ENC_FFN_DOWN, bid, spec.ffn, w)
    return tensors


def _linear(kind: gguf.MODEL_TENSOR, bid: int, n_in: int, n_out: int) -> list[_Tensor]:
    return [
        _Tensor(_name(kind, bid), (n_out, n_in), _F16, "normal"),
        _Tensor(_name(kind, bid, "bias"), (n_out,), _F32, "zeros"),
    ]


def _layer_norm(kind: gguf.MODEL_TENSOR, bid: int | None, width: int) -> list[_Tensor]:
    return [
        _Tensor(_name(kind, bid), (width,), _F32, "ones"),
        _Tensor(_name(kind, bid, "bias"), (width,), _F32, "zeros"),
    ]


def _rms_norm(kind: gguf.MODEL_TENSOR, bid: int | None, width: int) -> list[_Tensor]:
    return [_Tensor(_name(kind, bid), (width,), _F32, "ones")]


def _name(kind: gguf.MODEL_TENSOR, bid: int | None = None, suffix: str = "weight") -> str:
    return f"{gguf.TENSOR_NAMES[kind].format(bid=bid)}.{suffix}"


# ---------------------------------------------------------------- writing


def _write_gguf(part: Path, spec: ProjectorSpec, tensors: list[_Tensor]) -> None:
    writer = gguf.GGUFWriter(part, CLIP_ARCHITECTURE)
    try:
        _add_metadata(writer, spec)
        for tensor in tensors:
            writer.add_tensor_info(tensor.name, tensor.shape, np.dtype(tensor.dtype), tensor.nbytes)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for data in _tensor_data(tensors, np.random.default_rng(spec.seed)):
            writer.write_tensor_data(data)
    finally:
        writer.close()


def _tensor_data(tensors: list[_Tensor], rng: np.random.Generator) -> Iterator[np.ndarray]:
    """One array at a time, so a shape-true projector never sits whole in memory."""
    for tensor in tensors:
        if tensor.init == "normal":
            data = rng.standard_normal(tensor.shape, dtype=np.float32) * _WEIGHT_STD
        else:
            data = (np.ones if tensor.init == "ones" else np.zeros)(tensor.shape, np.float32)
        yield data.astype(tensor.dtype)


def _add_metadata(writer: gguf.GGUFWriter, spec: ProjectorSpec) -> None:
    writer.add_type(gguf.GGUFType.MMPROJ)
    writer.add_name(spec.model_name)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_clip_projector_type(spec.projector_type)
    writer.add_clip_has_vision_encoder(True)
    writer.add_vision_projection_dim(spec.projection_dim)
    writer.add_vision_image_size(spec.image_size)
    writer.add_vision_patch_size(spec.patch_size)
    writer.add_vision_embedding_length(spec.width)
    writer.add_vision_feed_forward_length(spec.ffn)
    writer.add_vision_block_count(spec.block_count)
    writer.add_vision_head_count(spec.heads)
    writer.add_vision_attention_layernorm_eps(_LAYER_NORM_EPS)
    if spec.is_qwen:
        _add_qwen_metadata(writer, spec)
        return
    writer.add_vision_use_gelu(True)
    writer.add_vision_image_mean(list(_IMAGE_MEAN_STD))
    writer.add_vision_image_std(list(_IMAGE_MEAN_STD))
    # Always written, although clip.cpp defaults to 4 (Gemma 3) or 2 (idefics3), so the
    # file says what it pools to.
    writer.add_vision_projector_scale_factor(spec.scale_factor)
    if spec.projector_type == _IDEFICS3:
        writer.add_vision_preproc_image_size(spec.tile_longest_edge)


def _add_qwen_metadata(writer: gguf.GGUFWriter, spec: ProjectorSpec) -> None:
    # Qwen2-VL's FFN is quick-GELU: clip.cpp's choice when neither use_gelu nor use_silu is set.
    if spec.projector_type == _QWEN25VL:
        writer.add_vision_use_silu(True)
        writer.add_vision_n_wa_pattern(spec.window_pattern)
    writer.add_vision_image_mean(list(_CLIP_MEAN))
    writer.add_vision_image_std(list(_CLIP_STD))
    writer.add_vision_spatial_merge_size(_QWEN_MERGE)
