"""Synthetic vision projectors: the file is a real Gemma 3 mmproj, and mtmd runs it."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest
from llama_cpp import mtmd_cpp

from engine.llama.handle import LlamaHandle
from engine.llama.load_params import LoadParams
from engine.model.inventory import read_inventory
from engine.model.synthetic import write_synthetic_model
from engine.model.synthetic_metadata import mrope_sections
from engine.model.synthetic_spec import SyntheticSpec
from engine.runtime.loaded_model import LoadedModel, load_model
from tests.synthetic_vision import (
    ProjectorSpec,
    language_model_for,
    write_synthetic_projector,
    write_synthetic_vlm,
)

pytestmark = pytest.mark.usefixtures("ggml_started")  # it builds Llama() itself

LM = SyntheticSpec(architecture="gemma3")  # 64 wide
PROJECTOR = ProjectorSpec(projection_dim=LM.n_embd)
# One thread: ggml's OpenMP workers spin between graph nodes, and on a loaded
# two-core machine a second thread turns each sub-millisecond graph into ~0.3 s.
THREADS = 1


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_synthetic_vlm(tmp_path_factory.mktemp("vlm"), LM, PROJECTOR)


@pytest.fixture(scope="module")
def language_model(vlm: tuple[Path, Path]) -> Iterator[LoadedModel]:
    model = load_model(LoadParams(str(vlm[0]), n_ctx=256, n_threads=THREADS))
    yield model
    model.close()


@pytest.fixture
def vision(vlm: tuple[Path, Path], language_model: LoadedModel) -> Iterator[int]:
    ctx = _mtmd_init(vlm[1], language_model)
    assert ctx, "mtmd_init_from_file returned NULL for a matching projector"
    yield ctx
    mtmd_cpp.mtmd_free(ctx)


# ---------------------------------------------------------------- the file


def test_projector_has_gemma3_keys(vlm: tuple[Path, Path]) -> None:
    fields = gguf.GGUFReader(vlm[1]).fields
    expected = {
        "general.architecture": "clip",
        "general.type": "mmproj",
        "clip.projector_type": "gemma3",
        "clip.has_vision_encoder": True,
        "clip.use_gelu": True,
        "clip.vision.projection_dim": LM.n_embd,
        "clip.vision.image_size": PROJECTOR.image_size,
        "clip.vision.patch_size": PROJECTOR.patch_size,
        "clip.vision.embedding_length": PROJECTOR.width,
        "clip.vision.feed_forward_length": PROJECTOR.ffn,
        "clip.vision.block_count": PROJECTOR.block_count,
        "clip.vision.attention.head_count": PROJECTOR.heads,
        "clip.vision.projector.scale_factor": PROJECTOR.scale_factor,
        "clip.vision.image_mean": [0.5, 0.5, 0.5],
        "clip.vision.image_std": [0.5, 0.5, 0.5],
    }
    assert {key: fields[key].contents() for key in expected} == expected
    assert "clip.vision.attention.layer_norm_epsilon" in fields


def test_projector_has_gemma3_tensors_with_clip_shapes_and_types(vlm: tuple[Path, Path]) -> None:
    tensors = {t.name: t for t in gguf.GGUFReader(vlm[1]).tensors}
    blocks = {
        f"v.blk.{bid}.{part}.{kind}"
        for bid in range(PROJECTOR.block_count)
        for part in ("ln1", "ln2", "attn_q", "attn_k", "attn_v", "attn_out", "ffn_up", "ffn_down")
        for kind in ("weight", "bias")
    }
    globals_ = {
        "v.patch_embd.weight",
        "v.patch_embd.bias",
        "v.position_embd.weight",
        "v.post_ln.weight",
        "v.post_ln.bias",
        "mm.soft_emb_norm.weight",
        "mm.input_projection.weight",
    }
    assert set(tensors) == blocks | globals_

    def ggml(name: str) -> tuple[list[int], str]:  # shape as ggml's ne, and type
        return tensors[name].shape.tolist(), tensors[name].tensor_type.name

    w, p = PROJECTOR.width, PROJECTOR.patch_size
    assert ggml("v.patch_embd.weight") == ([p, p, 3, w], "F32")
    assert ggml("v.position_embd.weight") == ([w, PROJECTOR.n_patches], "F32")
    # clip.cpp takes the projector's output width from ne[0] of the input projection
    assert ggml("mm.input_projection.weight") == ([LM.n_embd, w], "F16")
    assert ggml("v.blk.0.attn_q.weight") == ([w, w], "F16")
    assert ggml("v.blk.0.ffn_up.weight") == ([w, PROJECTOR.ffn], "F16")
    assert ggml("v.blk.0.ffn_down.weight") == ([PROJECTOR.ffn, w], "F16")
    assert ggml("v.blk.0.ln1.weight") == ([w], "F32")


def test_inventory_reads_it_as_a_gemma3_projector(
    vlm: tuple[Path, Path], language_model: LoadedModel
) -> None:
    projector, model = read_inventory(vlm[1]), language_model.inventory  # no 2nd tokenizer parse
    assert projector.is_vision_projector and projector.projector_type == "gemma3"
    assert not model.is_vision_projector
    assert model.architecture == "gemma3" and model.n_embd == LM.n_embd
    assert "mmproj" in vlm[1].name  # how the model library recognises projectors


def test_spec_counts_tokens_per_image() -> None:
    assert PROJECTOR.tokens_per_image == 16
    assert ProjectorSpec(image_size=64, patch_size=4, scale_factor=4).tokens_per_image == 16


@pytest.mark.parametrize(
    "fields",
    [
        {"projector_type": "llava"},
        {"image_size": 30},  # not a multiple of the patch size
        {"scale_factor": 3},  # 8 patches per side do not pool by 3
        {"heads": 5},  # 32 is not a multiple of 5
    ],
)
def test_spec_rejects_what_clip_cannot_build(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        ProjectorSpec(**fields)  # type: ignore[arg-type]


def test_vlm_refuses_a_projector_of_another_width(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="n_embd"):
        write_synthetic_vlm(tmp_path, LM, ProjectorSpec(projection_dim=96))
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- mtmd runs it


def test_mtmd_encodes_an_image_into_lm_width_embeddings(
    vision: int, language_model: LoadedModel
) -> None:
    assert mtmd_cpp.mtmd_support_vision(vision)
    chunks = _tokenize(vision, nx=40, ny=30)
    try:
        image = _image_chunk(chunks)
        n_tokens = mtmd_cpp.mtmd_input_chunk_get_n_tokens(image)
        assert n_tokens == PROJECTOR.tokens_per_image
        assert mtmd_cpp.mtmd_encode_chunk(vision, image) == 0
        embd = np.ctypeslib.as_array(
            mtmd_cpp.mtmd_get_output_embd(vision), shape=(n_tokens, LM.n_embd)
        )
        assert np.isfinite(embd).all()
        assert embd.std() > 0  # random weights give varied embeddings, not zeros
        assert mtmd_cpp.mtmd_decode_use_non_causal(vision, image)  # Gemma 3 attends both ways
        assert not mtmd_cpp.mtmd_decode_use_mrope(vision)
    finally:
        mtmd_cpp.mtmd_input_chunks_free(chunks)


def test_language_model_decodes_the_image_and_samples(
    vision: int, language_model: LoadedModel
) -> None:
    lctx = language_model.handle.context
    language_model.scheduler.forget_all()  # mtmd's helper writes into the context directly
    chunks = _tokenize(vision, nx=1, ny=1)  # any size is resized to the projector's square
    try:
        n_past = llama_cpp.llama_pos(0)
        rc = mtmd_cpp.mtmd_helper_eval_chunks(
            vision, lctx, chunks, 0, 0, 64, True, ctypes.byref(n_past)
        )
        assert rc == 0
        assert n_past.value == mtmd_cpp.mtmd_helper_get_n_pos(chunks)
    finally:
        mtmd_cpp.mtmd_input_chunks_free(chunks)
    n_vocab = language_model.handle.n_vocab
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(lctx, -1), shape=(n_vocab,))
    assert np.isfinite(logits).all()
    assert 0 <= int(logits.argmax()) < n_vocab


def test_mtmd_refuses_a_projector_of_another_width(
    tmp_path: Path, language_model: LoadedModel
) -> None:
    wrong = write_synthetic_projector(
        tmp_path / "mmproj-wrong.gguf", ProjectorSpec(projection_dim=96)
    )
    ctx = _mtmd_init(wrong, language_model)
    assert not ctx  # NULL and a log line, not an abort (mtmd leaks the loaded encoder)


# ---------------------------------------------------------------- helpers


def _mtmd_init(projector: Path, model: LoadedModel | llama_cpp.Llama) -> int | None:
    """No warmup: Qwen's warms up on a 46x46-token image, seconds on a CPU."""
    handle = LlamaHandle.of(model) if isinstance(model, llama_cpp.Llama) else model.handle
    params = mtmd_cpp.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = THREADS
    params.print_timings = False
    params.warmup = False
    return mtmd_cpp.mtmd_init_from_file(str(projector).encode(), handle.model, params)


def _tokenize(ctx: int, nx: int, ny: int) -> int:
    """Chunks for one prompt holding one random nx x ny RGB image."""
    rgb = np.random.default_rng(0).integers(0, 256, (ny, nx, 3), dtype=np.uint8).tobytes()
    bitmap = mtmd_cpp.mtmd_bitmap_init(nx, ny, (ctypes.c_uint8 * len(rgb)).from_buffer_copy(rgb))
    prompt = b"Look: " + mtmd_cpp.mtmd_default_marker() + b" What is it?"
    text = mtmd_cpp.mtmd_input_text(
        text=prompt, text_len=len(prompt), add_special=True, parse_special=True
    )
    chunks = mtmd_cpp.mtmd_input_chunks_init()
    try:
        bitmaps = (mtmd_cpp.mtmd_bitmap_p_ctypes * 1)(bitmap)
        assert mtmd_cpp.mtmd_tokenize(ctx, chunks, ctypes.byref(text), bitmaps, 1) == 0
    finally:
        mtmd_cpp.mtmd_bitmap_free(bitmap)  # the chunks hold their own copy
    return chunks


def _image_chunk(chunks: int) -> int:
    found = [
        chunk
        for i in range(mtmd_cpp.mtmd_input_chunks_size(chunks))
        if mtmd_cpp.mtmd_input_chunk_get_type(chunk := mtmd_cpp.mtmd_input_chunks_get(chunks, i))
        == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE
    ]
    assert len(found) == 1
    return found[0]


# ---------------------------------------------------------------- the other families


@pytest.fixture(scope="module")
def family_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Each family's pair; Qwen2-VL and 2.5 share one language model file."""
    folder = tmp_path_factory.mktemp("families")
    files = {
        kind: write_synthetic_vlm(folder / kind, projector=ProjectorSpec(projector_type=kind))
        for kind in ("idefics3", "qwen2vl_merger")
    }
    qwen25 = write_synthetic_projector(
        folder / "mmproj-qwen25.gguf", ProjectorSpec(projector_type="qwen2.5vl_merger")
    )
    files["qwen2.5vl_merger"] = (files["qwen2vl_merger"][0], qwen25)
    return files


def test_idefics3_projector_keys_and_tensors(family_files: dict[str, tuple[Path, Path]]) -> None:
    spec = ProjectorSpec(projector_type="idefics3")
    reader = gguf.GGUFReader(family_files["idefics3"][1])
    fields = {key: field.contents() for key, field in reader.fields.items()}
    assert fields["clip.projector_type"] == "idefics3"
    assert fields["clip.use_gelu"] is True
    assert fields["clip.vision.projector.scale_factor"] == 2
    assert fields["clip.vision.preproc_image_size"] == 3 * spec.image_size  # tiles per side
    assert fields["clip.vision.image_mean"] == [0.5, 0.5, 0.5]
    tensors = {t.name: (t.shape.tolist(), t.tensor_type.name) for t in reader.tensors}
    gemma3 = {t.name for t in gguf.GGUFReader(_gemma3_projector(family_files)).tensors}
    siglip = gemma3 - {"mm.soft_emb_norm.weight", "mm.input_projection.weight"}
    assert set(tensors) == siglip | {"mm.model.fc.weight"}  # same ViT, own projection
    # the pixel shuffle concatenates 2x2 patches of 32: ggml's [128, n_embd]
    assert tensors["mm.model.fc.weight"] == ([4 * spec.width, LM.n_embd], "F16")
    assert tensors["v.position_embd.weight"] == ([spec.width, spec.n_patches], "F32")


@pytest.mark.parametrize("kind", ["qwen2vl_merger", "qwen2.5vl_merger"])
def test_qwen_projector_keys_and_tensors(
    family_files: dict[str, tuple[Path, Path]], kind: str
) -> None:
    spec = ProjectorSpec(projector_type=kind)
    reader = gguf.GGUFReader(family_files[kind][1])
    fields = {key: field.contents() for key, field in reader.fields.items()}
    is_25 = kind == "qwen2.5vl_merger"
    assert fields["clip.projector_type"] == kind
    assert fields["clip.vision.spatial_merge_size"] == 2
    assert "clip.use_gelu" not in fields  # Qwen2-VL: clip.cpp's default quick GELU
    assert fields.get("clip.use_silu") is (True if is_25 else None)
    assert fields.get("clip.vision.n_wa_pattern") == (2 if is_25 else None)
    assert fields["clip.vision.image_mean"] == pytest.approx([0.48145466, 0.4578275, 0.40821073])
    tensors = {t.name: (t.shape.tolist(), t.tensor_type.name) for t in reader.tensors}
    w, p = spec.width, spec.patch_size
    # Qwen's Conv3D patch embedding as two Conv2Ds, no bias, no position embedding (rotary)
    patch = ([p, p, 3, w], "F16")
    assert tensors["v.patch_embd.weight"] == tensors["v.patch_embd.weight.1"] == patch
    assert "v.patch_embd.bias" not in tensors and "v.position_embd.weight" not in tensors
    assert tensors["mm.0.weight"] == ([4 * w, 4 * w], "F16")
    assert tensors["mm.2.weight"] == ([4 * w, LM.n_embd], "F16")
    assert tensors["mm.2.bias"] == ([LM.n_embd], "F32")
    assert ("v.blk.1.ffn_gate.weight" in tensors) is is_25  # 2.5: SiLU-gated FFN
    assert ("v.blk.1.ln1.bias" in tensors) is not is_25  # 2.5: RMSNorm, 2: LayerNorm
    assert ("v.post_ln.bias" in tensors) is not is_25


def test_language_models_of_the_families(family_files: dict[str, tuple[Path, Path]]) -> None:
    assert language_model_for("gemma3") == SyntheticSpec("gemma3")  # unchanged
    assert language_model_for("qwen2.5vl_merger").architecture == "qwen2vl"
    extra = language_model_for("idefics3").extra_tokens
    assert {"<fake_token_around_image>", "<global-img>", "<row_3_col_3>"} <= set(extra)
    llm = llama_cpp.Llama(
        model_path=str(family_files["idefics3"][0]), vocab_only=True, verbose=False
    )
    try:
        assert llm.n_vocab() == 49152 + len(extra)
        # one control token each, after the copied vocabulary: what mtmd looks up
        marker = llm.tokenize(b"<fake_token_around_image><global-img>", False, special=True)
        ids = [49152 + extra.index(t) for t in ("<fake_token_around_image>", "<global-img>")]
        assert marker == ids
        vocab = LlamaHandle.of(llm).vocab
        assert llama_cpp.llama_vocab_is_control(vocab, marker[0])
    finally:
        llm.close()


def test_qwen2vl_language_model_has_mrope_sections_and_qkv_biases(tmp_path: Path) -> None:
    spec = SyntheticSpec("qwen2vl", vocab_size=256)  # no tokenizer: quick to read back
    reader = gguf.GGUFReader(write_synthetic_model(tmp_path / "qwen2vl.gguf", spec))
    fields = {key: field.contents() for key, field in reader.fields.items()}
    assert fields["general.architecture"] == "qwen2vl"
    assert fields["qwen2vl.rope.dimension_sections"] == [2, 3, 3, 0]  # 8 pairs of a 16 head
    assert fields["qwen2vl.rope.freq_base"] == 1_000_000.0
    names = {t.name for t in reader.tensors}
    assert {"blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.1.attn_v.bias"} <= names
    assert not [name for name in names if "attn_q_norm" in name or "attn_k_norm" in name]
    assert mrope_sections(128) == (16, 24, 24, 0)  # Qwen2-VL's own


@pytest.mark.parametrize(
    ("kind", "n_tokens", "mrope"),
    [("idefics3", 16, False), ("qwen2vl_merger", 30, True), ("qwen2.5vl_merger", 30, True)],
)
def test_mtmd_encodes_each_family(
    family_files: dict[str, tuple[Path, Path]], kind: str, n_tokens: int, mrope: bool
) -> None:
    """mtmd opens the pair, tokenizes a 48x40 image (idefics3: the first of its tiles)
    and encodes it into the language model's width."""
    model_file, projector = family_files[kind]
    llm = llama_cpp.Llama(model_path=str(model_file), vocab_only=True, verbose=False)
    ctx = _mtmd_init(projector, llm)
    try:
        assert ctx, f"mtmd_init_from_file returned NULL for the {kind} pair"
        assert bool(mtmd_cpp.mtmd_decode_use_mrope(ctx)) is mrope
        chunks = _tokenize(ctx, nx=48, ny=40)
        try:
            image = _image_chunks(chunks)[0]
            assert mtmd_cpp.mtmd_input_chunk_get_n_tokens(image) == n_tokens
            assert mtmd_cpp.mtmd_encode_chunk(ctx, image) == 0
            embd = np.ctypeslib.as_array(
                mtmd_cpp.mtmd_get_output_embd(ctx), shape=(n_tokens, LM.n_embd)
            )
            assert np.isfinite(embd).all() and embd.std() > 0
            assert not mtmd_cpp.mtmd_decode_use_non_causal(ctx, image)
        finally:
            mtmd_cpp.mtmd_input_chunks_free(chunks)
    finally:
        if ctx:
            mtmd_cpp.mtmd_free(ctx)
        llm.close()


def test_idefics3_needs_its_markers_in_the_vocabulary(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lacks <fake_token_around_image>, <global-img>"):
        write_synthetic_vlm(tmp_path, SyntheticSpec("llama"), ProjectorSpec(64, "idefics3"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "fields",
    [
        {"projector_type": "qwen2vl_merger", "scale_factor": 4},  # clip merges 2x2
        {"projector_type": "qwen2vl_merger", "width": 24, "heads": 4},  # head size 6
        {"projector_type": "qwen2.5vl_merger", "window_pattern": 0},
        {"projector_type": "idefics3", "longest_edge": 16},  # smaller than a tile
    ],
)
def test_spec_rejects_what_clip_cannot_build_for_the_other_families(
    fields: dict[str, object],
) -> None:
    with pytest.raises(ValueError):
        ProjectorSpec(**fields)  # type: ignore[arg-type]


def test_synthetic_spec_checks_extra_tokens(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="repeat"):
        SyntheticSpec("llama", extra_tokens=("<a>", "<a>"))
    with pytest.raises(ValueError, match="vocab_size"):
        SyntheticSpec("llama", extra_tokens=("<a>",), vocab_size=256)
    with pytest.raises(ValueError, match=r"already in the vocabulary: \['<\|im_start\|>'\]"):
        write_synthetic_model(
            tmp_path / "m.gguf", SyntheticSpec("llama", extra_tokens=("<|im_start|>",))
        )
    assert list(tmp_path.iterdir()) == []


def _gemma3_projector(family_files: dict[str, tuple[Path, Path]]) -> Path:
    folder = family_files["idefics3"][1].parent
    return write_synthetic_projector(folder / "mmproj-gemma3.gguf", PROJECTOR)


def _image_chunks(chunks: int) -> list[int]:
    return [
        chunk
        for i in range(mtmd_cpp.mtmd_input_chunks_size(chunks))
        if mtmd_cpp.mtmd_input_chunk_get_type(chunk := mtmd_cpp.mtmd_input_chunks_get(chunks, i))
        == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE
    ]
