"""Random-weight vision projectors (mmproj GGUFs), paired with synthetic language models.

The image path (load the projector with llama.cpp's mtmd, preprocess, encode,
decode the embeddings into the language model) needs a real projector file, and
real ones are hundreds of MB that our machines cannot download. A projector
written here has the keys, tensor names, shapes and types that clip.cpp reads
for its projector type, with random weights, so a tiny one loads and encodes an
image in milliseconds while going through exactly the code a real one does.

Only Gemma 3's projector is written: a SigLIP ViT whose patch grid is
average-pooled by `scale_factor` per side, then RMS-normed and projected to the
language model's width. clip.cpp reads the pooling factor from
``clip.vision.projector.scale_factor`` (for llama.cpp's own tiny test model), so
an image costs (image_size / patch_size / scale_factor)² tokens: 16 by default.

mtmd refuses a projector whose output width differs from the language model's
n_embd, so `write_synthetic_vlm` writes the two together from one width.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from engine.synthetic import SyntheticSpec, write_synthetic_model

LOGGER = logging.getLogger(__name__)

PROJECTOR_TYPES: tuple[str, ...] = (gguf.VisionProjectorType.GEMMA3,)
CLIP_ARCHITECTURE = "clip"  # general.architecture of every mmproj file

_LAYER_NORM_EPS = 1e-6  # SigLIP's
_IMAGE_MEAN_STD = (0.5, 0.5, 0.5)  # Gemma 3's preprocessor normalises to [-1, 1]
_WEIGHT_STD = 0.02
_F32 = gguf.GGMLQuantizationType.F32
_F16 = gguf.GGMLQuantizationType.F16
_T = gguf.MODEL_TENSOR


@dataclass(frozen=True)
class ProjectorSpec:
    """Hyper-parameters of a synthetic projector; defaults make a tiny one for a 64-wide LM."""

    projection_dim: int = 64  # must equal the language model's n_embd
    projector_type: str = "gemma3"  # one of PROJECTOR_TYPES
    image_size: int = 32  # every image is resized to this square
    patch_size: int = 4
    width: int = 32  # ViT embedding length
    # ViT feed-forward length. Equal to width, clip.cpp's fix for old files swaps
    # ffn_up/ffn_down (same shapes then, so harmless) and logs a warning.
    ffn: int = 64
    block_count: int = 2
    heads: int = 2
    scale_factor: int = 2  # pooling per side; real Gemma 3 uses 4
    seed: int = 0

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

    @property
    def patches_per_side(self) -> int:
        return self.image_size // self.patch_size

    @property
    def n_patches(self) -> int:
        return self.patches_per_side**2

    @property
    def tokens_per_image(self) -> int:
        """Embeddings one image becomes in the language model's context."""
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


def write_synthetic_vlm(
    folder: Path,
    lm: SyntheticSpec | None = None,
    projector: ProjectorSpec | None = None,
    quant: str = "F16",
) -> tuple[Path, Path]:
    """Write a language model (gemma3 unless `lm` says otherwise) and a projector mtmd accepts.

    The pair is what a user downloads (model + mmproj) and is named like it, so
    the model library pairs them. Returns (model path, projector path).
    """
    folder = Path(folder)
    lm = lm if lm is not None else SyntheticSpec(architecture="gemma3")
    projector = projector if projector is not None else ProjectorSpec(projection_dim=lm.n_embd)
    if projector.projection_dim != lm.n_embd:
        raise ValueError(
            f"projector projects to {projector.projection_dim} but the model's n_embd is "
            f"{lm.n_embd}; mtmd would refuse the pair"
        )
    folder.mkdir(parents=True, exist_ok=True)
    model = write_synthetic_model(folder / f"{lm.model_name}-{quant}.gguf", lm, quant)
    mmproj = write_synthetic_projector(folder / f"mmproj-{lm.model_name}-F16.gguf", projector)
    return model, mmproj


# ---------------------------------------------------------------- tensor plan


def _tensor_plan(spec: ProjectorSpec) -> list[_Tensor]:
    """Every tensor clip.cpp loads for a Gemma 3 projector, typed as its converter writes them.

    The converter keeps the embeddings (patch conv, positions) in F32 and writes
    the input projection in F16 (llama.cpp issue 13025); other matrices follow
    the file type (F16) and vectors stay F32.
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
    plan += [
        _Tensor(_name(_T.V_MM_SOFT_EMB_NORM), (w,), _F32, "ones"),
        # ggml sees [projection_dim, width]: clip.cpp takes the projector's output width from ne[0]
        _Tensor(_name(_T.V_MM_INP_PROJ), (w, spec.projection_dim), _F16, "normal"),
    ]
    return plan


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


def _name(kind: gguf.MODEL_TENSOR, bid: int | None = None, suffix: str = "weight") -> str:
    return f"{gguf.TENSOR_NAMES[kind].format(bid=bid)}.{suffix}"


# ---------------------------------------------------------------- writing


def _write_gguf(part: Path, spec: ProjectorSpec, tensors: list[_Tensor]) -> None:
    writer = gguf.GGUFWriter(part, CLIP_ARCHITECTURE)
    try:
        _add_metadata(writer, spec)
        for tensor in tensors:
            writer.add_tensor_info(tensor.name, tensor.shape, tensor.dtype, tensor.nbytes)
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
    writer.add_vision_use_gelu(True)
    writer.add_vision_image_mean(list(_IMAGE_MEAN_STD))
    writer.add_vision_image_std(list(_IMAGE_MEAN_STD))
    # Always written, although clip.cpp defaults to 4, so the file says what it pools to.
    writer.add_vision_projector_scale_factor(spec.scale_factor)
