"""Projectors of real shapes without weights, for the VLMOpt planner's tests and benchmarks."""

from __future__ import annotations

import math
import os
from pathlib import Path

import gguf
import numpy as np

from engine.model.inventory import VISION_ARCHITECTURE
from engine.vision.projector import (
    QWEN_VL_TYPES,
    TENSOR_TYPE_BYTES,
    ProjectorFacts,
    qwen_vl_tensors,
)


def write_shape_only_projector(path: str | os.PathLike[str], facts: ProjectorFacts) -> Path:
    """A Qwen2-VL-layout mmproj GGUF with the facts' keys and tensor table and no weights.

    The tensor data is a hole in a sparse file, as engine.model.synthetic does for
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
            n_bytes = math.prod(shape) * TENSOR_TYPE_BYTES[kind]
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
