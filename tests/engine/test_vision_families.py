"""The image path for every VLM family we support, with tiny synthetic model + projector pairs.

Gemma 3 (fixed 16 tokens an image), SmolVLM / Idefics3 (images cut into tiles,
one image chunk per tile with text markers between) and Qwen2-VL / Qwen2.5-VL
(dynamic resolution, M-RoPE positions: (t, y, x) per image token). The
runtime's own decode is checked against llama.cpp's reference,
`mtmd_helper_eval_chunks`, logit for logit.
"""

from __future__ import annotations

import ctypes
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import llama_cpp
import numpy as np
import pytest
from llama_cpp import mtmd_cpp
from PIL import Image

from engine.generation.prompt_pieces import EncodedImage, Piece, TextRun
from engine.generation.sampling import SamplingSettings
from engine.generation.stream import StreamRequest
from engine.llama.load_params import LoadParams
from engine.model.chat_message import MEDIA_MARKER
from engine.model.image_input import ImageFile, RgbImage, decode_image
from engine.model.synthetic_spec import SyntheticSpec
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import LoadedModel, load_model
from engine.vision.options import VisionOptions
from engine.vision.runtime import VisionRuntime, attach_projector
from tests.synthetic_vision import (
    ProjectorSpec,
    language_model_for,
    write_synthetic_projector,
    write_synthetic_vlm,
)

pytestmark = pytest.mark.usefixtures("ggml_started")  # it builds Llama() itself

GREEDY = SamplingSettings(temperature=0.0, max_tokens=6)
THREADS = 1  # ggml's spinning workers make a 2nd thread slower on a busy 2-core machine
QWEN_MAX_TOKENS = 256  # Qwen's own limit (4096 tokens an image) does not fit n_ctx 1024
SMALL, TALL, LARGE = (48, 40), (30, 60), (1500, 900)


@dataclass(frozen=True)
class Family:
    projector_type: str
    options: VisionOptions
    # (chunks, tokens, positions) one image becomes, for SMALL, TALL and LARGE
    expected: dict[tuple[int, int], tuple[int, int, int]]


# Gemma 3: every image is resized to one 32 px square, 16 tokens.
GEMMA3 = Family("gemma3", VisionOptions(), dict.fromkeys((SMALL, TALL, LARGE), (1, 16, 16)))
# Idefics3: the longer side goes to 96 px (3 tiles), the other keeps the aspect ratio
# (rounded up to even), tiles of 32 px plus an overview, 16 tokens each:
# 48x40 -> 96x80: 3x3 tiles; 30x60 -> 48x96: 2x3; 1500x900 -> 96x58: 3x2.
IDEFICS3 = Family(
    "idefics3",
    VisionOptions(),
    {SMALL: (10, 160, 160), TALL: (7, 112, 112), LARGE: (7, 112, 112)},
)
# Qwen: sides rounded to multiples of 8 px (patch 4, 2x2 merge), then scaled down to the
# token budget: 48x40 -> 6x5 tokens; 30x60 -> 32x64 px, 4x8; 1500x900 -> 160x96 px, 20x12.
# An image advances the positions by its larger side in tokens (M-RoPE), not by its tokens.
QWEN_GRIDS = {SMALL: (6, 5), TALL: (4, 8), LARGE: (20, 12)}  # tokens across, down
_QWEN = {size: (1, nx * ny, max(nx, ny)) for size, (nx, ny) in QWEN_GRIDS.items()}
QWEN_OPTIONS = VisionOptions(image_max_tokens=QWEN_MAX_TOKENS)
QWEN2VL = Family("qwen2vl_merger", QWEN_OPTIONS, _QWEN)
QWEN25VL = Family("qwen2.5vl_merger", QWEN_OPTIONS, _QWEN)
FAMILIES = [GEMMA3, IDEFICS3, QWEN2VL, QWEN25VL]
IDS = [family.projector_type for family in FAMILIES]


@dataclass
class Loaded:
    family: Family
    model: LoadedModel
    mmproj: Path


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[Family], Loaded]]:
    """Each family's model + projector, written once; Qwen2-VL and 2.5 share their model."""
    models: dict[SyntheticSpec, LoadedModel] = {}
    done: dict[str, Loaded] = {}

    def pair(family: Family) -> Loaded:
        if family.projector_type not in done:
            folder = tmp_path_factory.mktemp(family.projector_type.replace(".", ""))
            projector = ProjectorSpec(projector_type=family.projector_type)
            lm = language_model_for(family.projector_type)
            if lm in models:
                mmproj = write_synthetic_projector(folder / "mmproj.gguf", projector)
            else:
                model_file, mmproj = write_synthetic_vlm(folder, lm, projector)
                params = LoadParams(str(model_file), n_ctx=1024, n_threads=THREADS)
                models[lm] = load_model(params)
            done[family.projector_type] = Loaded(family, models[lm], mmproj)
        return done[family.projector_type]

    yield pair
    for model in models.values():
        model.close()


@pytest.fixture(params=FAMILIES, ids=IDS)
def loaded(request: pytest.FixtureRequest, pairs: Callable[[Family], Loaded]) -> Loaded:
    return pairs(request.param)


@pytest.fixture
def vision(loaded: Loaded) -> Iterator[VisionRuntime]:
    runtime = attach_projector(loaded.model, str(loaded.mmproj), loaded.family.options)
    yield runtime
    loaded.model.scheduler.forget_all()  # the tests below also use the model's context directly


def picture(colour: str, size: tuple[int, int], name: str) -> ImageFile:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, "PNG")
    return ImageFile(name, buffer.getvalue())


def noise(size: tuple[int, int], seed: int) -> RgbImage:
    """Random pixels, so that every tile of a sliced image differs from the others."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return decode_image(buffer.getvalue(), f"noise-{seed}.png")


def image_pieces(pieces: list[Piece]) -> list[EncodedImage]:
    return [piece for piece in pieces if isinstance(piece, EncodedImage)]


# ---------------------------------------------------------------- conversations


def test_one_image_then_two_of_other_sizes_then_a_cached_turn(
    loaded: Loaded, vision: VisionRuntime
) -> None:
    session = ChatSession(loaded.model)
    small = picture("red", SMALL, "small.png")
    first = session.reply("What is it?", GREEDY, images=[small])
    assert first.stats.generated_tokens > 0
    assert vision.images_encoded == 1
    tall, large = picture("blue", TALL, "tall.png"), picture("green", LARGE, "large.png")
    second = session.reply("And these two?", GREEDY, images=[tall, large])
    assert second.stats.generated_tokens > 0
    assert vision.images_encoded == 3  # the first turn's image comes from the cache
    image_tokens = sum(loaded.family.expected[size][1] for size in (SMALL, TALL, LARGE))
    assert second.stats.prompt_tokens > image_tokens
    assert second.stats.reused_prompt_tokens > first.stats.prompt_tokens - 8  # KV kept
    third = session.reply("Which one is the largest?", GREEDY)
    assert third.stats.generated_tokens > 0
    assert vision.images_encoded == 3  # the history's images: cached embeddings, no encode
    assert vision.events[-2:] == ["reused 3 cached image(s)", "language decode started"]
    assert third.stats.reused_prompt_tokens > second.stats.prompt_tokens - 8


@pytest.mark.parametrize("size", [SMALL, TALL, LARGE], ids=["small", "tall", "large"])
def test_image_chunks_tokens_and_positions(
    loaded: Loaded, vision: VisionRuntime, size: tuple[int, int]
) -> None:
    pieces = vision.prepare(f"Look: {MEDIA_MARKER}", [noise(size, seed=1)])
    images = image_pieces(pieces)
    chunks, tokens, positions = loaded.family.expected[size]
    assert (len(images), sum(i.n_tokens for i in images), sum(i.n_pos for i in images)) == (
        chunks,
        tokens,
        positions,
    )
    assert all(i.embeddings.shape[1] == loaded.model.inventory.n_embd for i in images)
    if loaded.family.projector_type == "idefics3":
        # tiles row by row, then the overview, with mtmd's markers as text between them
        marker_runs = [p for p in pieces[1:] if isinstance(p, TextRun)]
        assert len(marker_runs) == chunks  # one after each chunk (the last closes the image)
    if size in QWEN_GRIDS and loaded.family.options is QWEN_OPTIONS:
        n_x, n_y = QWEN_GRIDS[size]  # M-RoPE: (t, y, x, z) a token, row by row
        index = np.arange(images[0].n_tokens)
        at = images[0].positions_at(100)
        expected = [np.full_like(index, 100), 100 + index // n_x, 100 + index % n_x, 0 * index]
        np.testing.assert_array_equal(at, np.stack(expected))
    else:  # one position a token, in order
        np.testing.assert_array_equal(images[0].positions_at(7)[0], 7 + np.arange(tokens // chunks))


# ---------------------------------------------------------------- against llama.cpp's helper


def test_runtime_decode_matches_mtmd_helper_eval_chunks(
    loaded: Loaded, vision: VisionRuntime
) -> None:
    """Same prompt, same images: the runtime's embeddings, positions (M-RoPE for Qwen) and
    text runs give exactly the logits llama.cpp's own helper gives."""
    images = [noise(SMALL, seed=2), noise((300, 180), seed=3)]
    text = f"Look at {MEDIA_MARKER} and at {MEDIA_MARKER}. Same?"
    ours, our_n_past = _runtime_logits(loaded, vision.prepare(text, images))
    reference, n_past = _helper_logits(loaded, text, images)
    assert our_n_past == n_past
    np.testing.assert_array_equal(ours, reference)


@pytest.mark.parametrize("loaded", [QWEN2VL], ids=["qwen2vl_merger"], indirect=True)
def test_mrope_positions_decide_the_logits(loaded: Loaded, vision: VisionRuntime) -> None:
    """The parity test above can fail on positions: one sequential position per image
    token, instead of M-RoPE's (t, y, x), changes the logits."""
    images = [noise(LARGE, seed=4)]
    text = f"Look at {MEDIA_MARKER} now."
    pieces = vision.prepare(text, images)
    reference, _ = _helper_logits(loaded, text, images)

    def sequential(piece: Piece) -> Piece:
        if not isinstance(piece, EncodedImage):
            return piece
        flat = np.tile(np.arange(piece.n_tokens), (4, 1))
        return replace(piece, pos_base=flat, pos_step=np.ones_like(flat), n_pos=piece.n_tokens)

    wrong, _ = _runtime_logits(loaded, [sequential(p) for p in pieces])
    assert np.abs(wrong - reference).max() > 1e-3


@pytest.mark.parametrize("loaded", [IDEFICS3], ids=["idefics3"], indirect=True)
def test_cached_tiles_keep_their_own_embeddings(loaded: Loaded, vision: VisionRuntime) -> None:
    images = [noise(SMALL, seed=5)]
    text = f"Look at {MEDIA_MARKER} again."
    vision.prepare(text, images)  # encodes; every image is cached from now on
    cached = vision.prepare(text, images)
    assert vision.images_encoded == 1
    tiles = image_pieces(cached)
    assert len({tile.embeddings.tobytes() for tile in tiles}) == len(tiles) == 10
    ours, _ = _runtime_logits(loaded, cached)
    np.testing.assert_array_equal(ours, _helper_logits(loaded, text, images)[0])


# ---------------------------------------------------------------- helpers


def _logits(model: LoadedModel) -> np.ndarray:
    row = llama_cpp.llama_get_logits_ith(model.handle.context, -1)
    return np.ctypeslib.as_array(row, shape=(model.handle.n_vocab,)).copy()


def _clear(model: LoadedModel) -> None:
    model.scheduler.forget_all()


def _runtime_logits(loaded: Loaded, pieces: list[Piece]) -> tuple[np.ndarray, int]:
    """The scheduler's evaluation of the prompt: the logits its first token is drawn from."""
    _clear(loaded.model)
    one_token = GREEDY.with_changes(max_tokens=1)
    request = StreamRequest(tuple(pieces), one_token, reuse_cache=False)
    stream = loaded.model.scheduler.admit(request, 0, seed=0)
    while not stream.done:
        loaded.model.scheduler.step()
    return _logits(loaded.model), stream.n_past


def _helper_logits(loaded: Loaded, text: str, images: list[RgbImage]) -> tuple[np.ndarray, int]:
    """mtmd's reference path: tokenize, then encode + decode every chunk with its helper."""
    model = loaded.model
    params = mtmd_cpp.mtmd_context_params_default()
    params.use_gpu, params.n_threads, params.warmup = False, THREADS, False
    params.print_timings = False
    params.image_max_tokens = loaded.family.options.image_max_tokens
    ctx = mtmd_cpp.mtmd_init_from_file(str(loaded.mmproj).encode(), model.handle.model, params)
    assert ctx
    chunks = mtmd_cpp.mtmd_input_chunks_init()
    bitmaps = [
        mtmd_cpp.mtmd_bitmap_init(
            i.width, i.height, (ctypes.c_uint8 * len(i.pixels)).from_buffer_copy(i.pixels)
        )
        for i in images
    ]
    try:
        encoded = text.encode()
        add_bos = model.handle.wants_bos()
        prompt = mtmd_cpp.mtmd_input_text(
            text=encoded, text_len=len(encoded), add_special=add_bos, parse_special=True
        )
        array = (mtmd_cpp.mtmd_bitmap_p_ctypes * len(bitmaps))(*bitmaps)
        assert mtmd_cpp.mtmd_tokenize(ctx, chunks, ctypes.byref(prompt), array, len(bitmaps)) == 0
        _clear(model)
        n_past = llama_cpp.llama_pos(0)
        lctx, n_batch = model.handle.context, model.params.n_batch
        code = mtmd_cpp.mtmd_helper_eval_chunks(
            ctx, lctx, chunks, 0, 0, n_batch, True, ctypes.byref(n_past)
        )
        assert code == 0
        return _logits(model), n_past.value
    finally:
        for bitmap in bitmaps:
            mtmd_cpp.mtmd_bitmap_free(bitmap)
        mtmd_cpp.mtmd_input_chunks_free(chunks)
        mtmd_cpp.mtmd_free(ctx)
