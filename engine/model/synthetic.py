"""Random-weight GGUF models of real architectures, for tests and benchmarks.

Our build and test machines have no network, so real checkpoints cannot be
downloaded there. They are not needed: the time llama.cpp spends per token
depends on tensor shapes and types, not on the weight values. A model written
here has a real architecture's keys, tensor names and shapes and random
weights, so a tiny one makes a fast test and a shape-true one (40 layers,
128 experts, tens of GB) benchmarks like the real thing.

Large models are streamed to disk tensor by tensor. For each weight matrix a
small random block of rows is drawn and encoded once, then repeated to the full
row count, so writing costs disk bandwidth rather than RNG and quantizer time,
and memory stays at a few MB whatever the model size.

The tokenizer (every ``tokenizer.ggml.*`` key and the chat template) is copied
from the embedded default model, SmolLM2-135M-Instruct, so synthetic models
tokenize and template prompts like a real one (vocabulary of 49152 tokens).
``SyntheticSpec.extra_tokens`` appends special tokens to it, as a vision-language
model's tokenizer adds its image markers.

Besides the text architectures, ``qwen2vl`` (Qwen2-VL and Qwen2.5-VL's language
model) is written for the projectors of ``tests.synthetic_vision``: Qwen2 blocks
(q/k/v biases) whose M-RoPE splits each head's rotary pairs into time, height and
width sections (``rope.dimension_sections``).

``shape_only_header`` returns such a model's header bytes and file size without
writing anything, for a server that serves a shape-true file it never stores
(tests/local_hub): real tensor names, shapes and types, a llama.cpp quant mix
drawn with per-tensor types, and a tokenizer as large as the real model's
(``SyntheticSpec.tokenizer_size``).

Only the types in DIRECT_QUANTS are written directly (numpy for F32/F16,
``gguf.quants`` for the rest). Others (K-quants, ...) come from
``quantize_model``, which runs llama.cpp's own quantizer on an F16 model. K-quants
need rows divisible by 256; for narrower rows (all of a tiny model's) llama.cpp
falls back by itself to a compatible type (e.g. Q5_0 or Q8_0) and logs a
warning, so a "Q4_K_M" tiny model is really a mix of legacy quants.
"""

from __future__ import annotations

import ctypes
import logging
import math
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import gguf
import numpy as np
from gguf.quants import quant_shape_to_byte_shape, quantize

from engine.model.synthetic_metadata import add_metadata, vocab_size_of
from engine.model.synthetic_spec import (
    ARCHES,
    DIRECT_QUANTS,
    FILE_TYPES,
    QK_NORM_ARCHES,
    QKV_BIAS_ARCHES,
    SyntheticSpec,
)

LOGGER = logging.getLogger(__name__)

_WEIGHT_STD = 0.02
_BLOCK_ELEMENTS = 1 << 20  # random values drawn per weight tensor; the rest repeats them
_TOKENIZER_PREFIX = "tokenizer."

_T = gguf.MODEL_TENSOR


@dataclass(frozen=True)
class _Tensor:
    """One tensor to write. `shape` is numpy order (GGUF lists dims reversed)."""

    name: str
    shape: tuple[int, ...]
    qtype: gguf.GGMLQuantizationType

    @property
    def is_matrix(self) -> bool:
        return len(self.shape) > 1

    @property
    def nbytes(self) -> int:
        return math.prod(quant_shape_to_byte_shape(self.shape, self.qtype))


class _RepeatedRows:
    """Encoded rows repeated to `n_rows`; quacks enough like ndarray for write_tensor_data."""

    def __init__(self, block: np.ndarray, n_rows: int) -> None:
        self.block = block  # uint8, (rows, row_bytes)
        self.n_rows = n_rows
        self.nbytes = n_rows * block.shape[1]

    def tofile(self, fout: IO[bytes]) -> None:
        repeats, rest = divmod(self.n_rows, self.block.shape[0])
        for _ in range(repeats):
            self.block.tofile(fout)
        self.block[:rest].tofile(fout)


# ---------------------------------------------------------------- public API


def write_synthetic_model(path: Path, spec: SyntheticSpec, quant: str = "F16") -> Path:
    """Write a random-weight GGUF for `spec` at `path` (atomically) and return the path."""
    path = Path(path)
    tensors = _tensor_plan(spec, vocab_size_of(spec), _direct_qtype(quant))
    part = path.with_suffix(path.suffix + ".part")
    started = time.monotonic()
    try:
        _write_gguf(part, spec, quant, tensors)
        part.replace(path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    size_mb = path.stat().st_size / 2**20
    elapsed = time.monotonic() - started
    LOGGER.info("wrote %s (%s, %.1f MiB) in %.2f s", path, spec.model_name, size_mb, elapsed)
    return path


def write_shape_only_model(path: Path, spec: SyntheticSpec, quant: str) -> Path:
    """A GGUF with every real header, tensor name, shape and type, and no weights at all.

    The tensor data is a hole in a sparse file (zeros, taking no disk space), so a
    235B-parameter model's inventory costs milliseconds: what the planner's
    simulations need. Any ggml type works (Q2_K, IQ4_XS, ...), since nothing is
    encoded. llama.cpp could even load it, computing on zeros.
    """
    path = Path(path)
    tensors = _tensor_plan(spec, vocab_size_of(spec), _ggml_type(quant))
    part = path.with_suffix(path.suffix + ".part")
    try:
        _write_gguf(part, spec, _nearest_file_type(quant), tensors, shape_only=True)
        part.replace(path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return path


def shape_only_header(
    spec: SyntheticSpec,
    quant: str,
    tensor_types: Sequence[tuple[str, str]] = (),
    file_type: str | None = None,
) -> tuple[bytes, int]:
    """The header of a shape-only GGUF for `spec`, and the size the whole file would have.

    The header (metadata and tensor table, as gguf's writer lays them out) is padded to
    general.alignment, so the tensor data would start right after it; nothing is written
    to disk that stays. Matrices are `quant` (any ggml type) unless a (regex, ggml type)
    pair of `tensor_types` fully matches the tensor's name first, as llama-quantize's
    --tensor-type chooses, so a llama.cpp mix such as Q4_K_M can be drawn; norms and the
    MoE router stay F32. `file_type` labels the file (general.file_type: "Q4_K_M", ...);
    by default `quant` if llama.cpp names a file type after it, else as write_shape_only_model.
    """
    tensors = _retyped(_tensor_plan(spec, vocab_size_of(spec), _ggml_type(quant)), tensor_types)
    label = file_type or (quant if _names_a_file_type(quant) else _nearest_file_type(quant))
    with tempfile.TemporaryDirectory(prefix="shape-only-header-") as folder:
        part = Path(folder) / "header.gguf"
        writer = gguf.GGUFWriter(part, gguf.MODEL_ARCH_NAMES[ARCHES[spec.architecture]])
        try:
            _write_header(writer, spec, label, tensors)
        finally:
            writer.close()
        header = part.read_bytes()
    align = writer.data_alignment
    data_start = gguf.GGUFWriter.ggml_pad(len(header), align)
    data_size = sum(gguf.GGUFWriter.ggml_pad(tensor.nbytes, align) for tensor in tensors)
    return header + bytes(data_start - len(header)), data_start + data_size


def quantize_model(src: Path, dst: Path, quant: str) -> Path:
    """Quantize `src` to `dst` with llama.cpp (e.g. "Q4_K_M", "Q6_K", "Q8_0"); return `dst`."""
    import llama_cpp  # loads the native library; write_synthetic_model does not need it

    dst = Path(dst)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = _llama_ftype(llama_cpp, quant)
    part = dst.with_suffix(dst.suffix + ".part")
    try:
        rc = llama_cpp.llama_model_quantize(
            str(src).encode(), str(part).encode(), ctypes.byref(params)
        )
        if rc != 0:
            raise RuntimeError(f"llama_model_quantize {src} -> {quant} failed (code {rc})")
        part.replace(dst)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    LOGGER.info("quantized %s -> %s (%s)", src, dst, quant)
    return dst


# ---------------------------------------------------------------- quant types


def _direct_qtype(quant: str) -> gguf.GGMLQuantizationType:
    if quant not in DIRECT_QUANTS:
        raise ValueError(
            f"quant {quant!r} cannot be written directly; use one of {', '.join(DIRECT_QUANTS)} "
            "and quantize_model() for others"
        )
    return gguf.GGMLQuantizationType[quant]


def _ggml_type(quant: str) -> gguf.GGMLQuantizationType:
    try:
        return gguf.GGMLQuantizationType[quant]
    except KeyError:
        raise ValueError(f"unknown ggml quantization type {quant!r}") from None


def _names_a_file_type(quant: str) -> bool:
    return quant in FILE_TYPES or f"MOSTLY_{quant}" in gguf.LlamaFileType.__members__


def _llama_ftype(llama_cpp: Any, quant: str) -> int:
    name = "LLAMA_FTYPE_ALL_F32" if quant == "F32" else f"LLAMA_FTYPE_MOSTLY_{quant}"
    ftype = getattr(llama_cpp, name, None)
    if not isinstance(ftype, int):
        raise ValueError(f"unknown llama.cpp quantization type {quant!r}")
    return ftype


# ---------------------------------------------------------------- tensor plan


def _tensor_plan(
    spec: SyntheticSpec, n_vocab: int, qtype: gguf.GGMLQuantizationType
) -> list[_Tensor]:
    """Every tensor llama.cpp's loader wants for `spec`, in file order."""
    plan = [
        (_name(_T.TOKEN_EMBD), (n_vocab, spec.n_embd)),
        (_name(_T.OUTPUT_NORM), (spec.n_embd,)),
    ]
    if not spec.ties_output:
        plan.append((_name(_T.OUTPUT), (n_vocab, spec.n_embd)))
    for bid in range(spec.n_layer):
        plan += _attention_tensors(spec, bid) + _ffn_tensors(spec, bid)
    tensors = [_Tensor(name, shape, _tensor_type(name, shape, qtype)) for name, shape in plan]
    _check_rows(tensors)
    return tensors


def _attention_tensors(spec: SyntheticSpec, bid: int) -> list[tuple[str, tuple[int, ...]]]:
    q_width = spec.n_head * spec.head_size
    kv_width = spec.n_head_kv * spec.head_size
    tensors = [
        (_name(_T.ATTN_NORM, bid), (spec.n_embd,)),
        (_name(_T.ATTN_Q, bid), (q_width, spec.n_embd)),
        (_name(_T.ATTN_K, bid), (kv_width, spec.n_embd)),
        (_name(_T.ATTN_V, bid), (kv_width, spec.n_embd)),
        (_name(_T.ATTN_OUT, bid), (spec.n_embd, q_width)),
    ]
    if spec.architecture in QKV_BIAS_ARCHES:
        tensors.append((_name(_T.ATTN_Q, bid, "bias"), (q_width,)))
        tensors.append((_name(_T.ATTN_K, bid, "bias"), (kv_width,)))
        tensors.append((_name(_T.ATTN_V, bid, "bias"), (kv_width,)))
    if spec.architecture in QK_NORM_ARCHES:
        tensors.append((_name(_T.ATTN_Q_NORM, bid), (spec.head_size,)))
        tensors.append((_name(_T.ATTN_K_NORM, bid), (spec.head_size,)))
    if spec.architecture == "gemma3":
        tensors.append((_name(_T.ATTN_POST_NORM, bid), (spec.n_embd,)))
    return tensors


def _ffn_tensors(spec: SyntheticSpec, bid: int) -> list[tuple[str, tuple[int, ...]]]:
    tensors: list[tuple[str, tuple[int, ...]]] = [(_name(_T.FFN_NORM, bid), (spec.n_embd,))]
    if spec.is_moe:
        n_exp, n_ff = spec.n_expert, spec.n_ff_expert
        tensors += [
            (_name(_T.FFN_GATE_INP, bid), (n_exp, spec.n_embd)),
            (_name(_T.FFN_GATE_EXP, bid), (n_exp, n_ff, spec.n_embd)),
            (_name(_T.FFN_UP_EXP, bid), (n_exp, n_ff, spec.n_embd)),
            (_name(_T.FFN_DOWN_EXP, bid), (n_exp, spec.n_embd, n_ff)),
        ]
    else:
        tensors += [
            (_name(_T.FFN_GATE, bid), (spec.n_ff, spec.n_embd)),
            (_name(_T.FFN_UP, bid), (spec.n_ff, spec.n_embd)),
            (_name(_T.FFN_DOWN, bid), (spec.n_embd, spec.n_ff)),
        ]
    if spec.architecture == "gemma3":
        tensors.append((_name(_T.FFN_POST_NORM, bid), (spec.n_embd,)))
    return tensors


def _name(kind: gguf.MODEL_TENSOR, bid: int | None = None, suffix: str = "weight") -> str:
    return f"{gguf.TENSOR_NAMES[kind].format(bid=bid)}.{suffix}"


def _tensor_type(
    name: str, shape: tuple[int, ...], qtype: gguf.GGMLQuantizationType
) -> gguf.GGMLQuantizationType:
    # Norms are 1-D and stay F32; so does the MoE router, as real converters and
    # llama-quantize leave it.
    if len(shape) == 1 or name.endswith("ffn_gate_inp.weight"):
        return gguf.GGMLQuantizationType.F32
    return qtype


def _retyped(tensors: list[_Tensor], tensor_types: Sequence[tuple[str, str]]) -> list[_Tensor]:
    """`tensors` with each quantized one's type from the first (regex, type) matching its name."""
    if not tensor_types:
        return tensors
    rules = [(re.compile(pattern), _ggml_type(quant)) for pattern, quant in tensor_types]
    retyped = []
    for tensor in tensors:
        if tensor.qtype != gguf.GGMLQuantizationType.F32:  # norms and router stay F32
            qtype = next((q for rule, q in rules if rule.fullmatch(tensor.name)), tensor.qtype)
            tensor = replace(tensor, qtype=qtype)
        retyped.append(tensor)
    _check_rows(retyped)
    return retyped


def _check_rows(tensors: list[_Tensor]) -> None:
    for tensor in tensors:
        block_size = gguf.GGML_QUANT_SIZES[tensor.qtype][0]
        if tensor.shape[-1] % block_size:
            raise ValueError(
                f"{tensor.name}: row width {tensor.shape[-1]} is not a multiple of "
                f"{tensor.qtype.name} block size {block_size}"
            )


# ---------------------------------------------------------------- writing


def _write_gguf(
    part: Path, spec: SyntheticSpec, quant: str, tensors: list[_Tensor], shape_only: bool = False
) -> None:
    writer = gguf.GGUFWriter(part, gguf.MODEL_ARCH_NAMES[ARCHES[spec.architecture]])
    try:
        _write_header(writer, spec, quant, tensors)
        if shape_only:
            _leave_a_hole_for_the_data(writer, tensors)
            return
        rng = np.random.default_rng(spec.seed)
        for tensor in tensors:
            # a _RepeatedRows writes itself as an ndarray would (tofile), without the memory
            writer.write_tensor_data(_tensor_data(tensor, rng))  # type: ignore[arg-type]
    finally:
        writer.close()


def _write_header(
    writer: gguf.GGUFWriter, spec: SyntheticSpec, quant: str, tensors: list[_Tensor]
) -> None:
    """Metadata and tensor table; the tensor data follows, aligned."""
    add_metadata(writer, spec, quant)
    for tensor in tensors:
        shape = quant_shape_to_byte_shape(tensor.shape, tensor.qtype)
        writer.add_tensor_info(tensor.name, shape, np.dtype(np.uint8), tensor.nbytes, tensor.qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()


def _leave_a_hole_for_the_data(writer: gguf.GGUFWriter, tensors: list[_Tensor]) -> None:
    if not writer.fout:
        raise RuntimeError("the GGUF writer has no open file to leave room in")
    fout = writer.fout[0]
    fout.flush()
    align = writer.data_alignment
    start = gguf.GGUFWriter.ggml_pad(fout.tell(), align)
    fout.truncate(start + sum(gguf.GGUFWriter.ggml_pad(t.nbytes, align) for t in tensors))


def _nearest_file_type(quant: str) -> str:
    """general.file_type only labels the file; use the closest type we know a label for."""
    return quant if quant in FILE_TYPES else "F16"


def _tensor_data(tensor: _Tensor, rng: np.random.Generator) -> np.ndarray | _RepeatedRows:
    if not tensor.is_matrix:
        return np.ones(tensor.shape, dtype=np.float32)  # norm weights
    n_cols = tensor.shape[-1]
    n_rows = math.prod(tensor.shape[:-1])
    block_rows = max(1, min(n_rows, _BLOCK_ELEMENTS // n_cols))
    block = rng.standard_normal((block_rows, n_cols), dtype=np.float32) * _WEIGHT_STD
    return _RepeatedRows(_encode(block, tensor.qtype), n_rows)


def _encode(block: np.ndarray, qtype: gguf.GGMLQuantizationType) -> np.ndarray:
    """Rows of float32 -> rows of bytes in `qtype`."""
    if qtype == gguf.GGMLQuantizationType.F32:
        encoded = block
    elif qtype == gguf.GGMLQuantizationType.F16:
        encoded = block.astype(np.float16)
    else:
        encoded = quantize(block, qtype)
    return np.ascontiguousarray(encoded).view(np.uint8)
