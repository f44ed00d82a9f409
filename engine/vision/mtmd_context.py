"""The one place that talks to llama.cpp's multimodal library (mtmd) through ctypes.

An `MtmdContext` is the vision encoder of a projector, opened against the
resident language model. It turns a prompt with image markers into plain
values - text token runs and encoded images whose embeddings live in host
memory (numpy) - so nothing after it needs the encoder: the context can be
freed before the language model decodes (VLMOpt's overlap avoidance), and an
image already encoded is never encoded again (its embeddings are cached by
the digest of its pixels).
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence

import llama_cpp
import numpy as np
from llama_cpp import mtmd_cpp

from engine.errors import BadInputError
from engine.generation.prompt_pieces import TILE_MARK, EncodedImage, Piece, TextRun
from engine.llama import log_capture as llama_log
from engine.model.chat_message import MEDIA_MARKER
from engine.model.image_input import RgbImage
from engine.vision.options import VisionOptions

log = logging.getLogger(__name__)

_FLASH_ATTN = {True: 1, False: 0}  # llama_flash_attn_type: ENABLED / DISABLED


class MtmdContext:
    """A projector's encoder, opened on `model` with the plan's VLMOpt options; close() frees it."""

    def __init__(
        self,
        llama_model: llama_cpp.llama_model_p,
        mmproj_path: str,
        options: VisionOptions,
        n_threads: int,
    ) -> None:
        llama_log.install_mtmd()
        params = mtmd_cpp.mtmd_context_params_default()
        self.on_gpu = params.use_gpu = options.encoder_on_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = False
        params.flash_attn_type = _FLASH_ATTN[options.flash_attention]
        params.image_min_tokens = options.image_min_tokens
        params.image_max_tokens = options.image_max_tokens
        self._llama_model = llama_model
        self._ctx: ctypes.c_void_p | None = mtmd_cpp.mtmd_init_from_file(
            mmproj_path.encode(), llama_model, params
        )
        if not self._ctx:
            raise BadInputError(
                f"{mmproj_path}: llama.cpp could not open this vision projector for the model "
                "(a projector made for another model, or a damaged file)"
            )
        if not mtmd_cpp.mtmd_support_vision(self._ctx):
            self.close()
            raise BadInputError(f"{mmproj_path}: this projector has no vision encoder")
        self.uses_mrope = bool(mtmd_cpp.mtmd_decode_use_mrope(self._ctx))
        self.n_embd = int(llama_cpp.llama_model_n_embd_inp(llama_model))

    def close(self) -> None:
        if self._ctx is not None:
            mtmd_cpp.mtmd_free(self._ctx)
            self._ctx = None

    def prepare(
        self,
        prompt: str,
        images: Sequence[RgbImage],
        cached: Callable[[str], EncodedImage | None],
        add_special: bool,
    ) -> list[Piece]:
        """Split the prompt at its markers into text runs and encoded images, in order.

        Images `cached` already knows are not encoded again.
        """
        ctx = self._require_open()
        bitmaps = [self._bitmap(image, index) for index, image in enumerate(images)]
        tiles: Counter[str] = Counter()  # chunks seen so far of each image occurrence
        chunks = mtmd_cpp.mtmd_input_chunks_init()
        try:
            text = mtmd_cpp.mtmd_input_text()
            encoded = prompt.encode("utf-8")
            text.text, text.text_len = encoded, len(encoded)
            text.add_special, text.parse_special = add_special, True
            array = (mtmd_cpp.mtmd_bitmap_p_ctypes * max(len(bitmaps), 1))(*bitmaps)
            code = mtmd_cpp.mtmd_tokenize(ctx, chunks, ctypes.byref(text), array, len(bitmaps))
            if code != 0:
                raise BadInputError(_tokenize_error(code, prompt.count(MEDIA_MARKER), len(images)))
            return [
                self._piece(mtmd_cpp.mtmd_input_chunks_get(chunks, i), cached, tiles)
                for i in range(mtmd_cpp.mtmd_input_chunks_size(chunks))
            ]
        finally:
            mtmd_cpp.mtmd_input_chunks_free(chunks)
            for bitmap in bitmaps:
                mtmd_cpp.mtmd_bitmap_free(bitmap)

    def _bitmap(self, image: RgbImage, index: int) -> ctypes.c_void_p:
        """The id names the occurrence (every tile of a sliced image gets the same one)."""
        data = (ctypes.c_uint8 * len(image.pixels)).from_buffer_copy(image.pixels)
        bitmap: ctypes.c_void_p = mtmd_cpp.mtmd_bitmap_init(image.width, image.height, data)
        if not bitmap:
            raise BadInputError(f"{image.name}: llama.cpp could not take the image")
        mtmd_cpp.mtmd_bitmap_set_id(bitmap, f"{index}:{image.digest}".encode())
        return bitmap

    def _piece(
        self,
        chunk: ctypes.c_void_p,
        cached: Callable[[str], EncodedImage | None],
        tiles: Counter[str],
    ) -> Piece:
        """A text run, or an image chunk's embeddings: from the cache when known.

        Projectors that slice a large image (Idefics3) give one chunk per tile,
        all with the image's id; tile k > 0 is keyed `digest#k`, so each keeps its
        own embeddings, and tile 0 (the whole image elsewhere) is keyed `digest`.
        """
        kind = mtmd_cpp.mtmd_input_chunk_get_type(chunk)
        if kind == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t(0)
            tokens = mtmd_cpp.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            return TextRun(tuple(tokens[i] for i in range(n.value)))
        if kind != mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE:
            raise BadInputError("this projector gave a non-image input; only images are supported")
        occurrence = (mtmd_cpp.mtmd_input_chunk_get_id(chunk) or b"").decode()
        digest = occurrence.partition(":")[2]
        tile = tiles[occurrence]
        tiles[occurrence] += 1
        key = digest if tile == 0 else f"{digest}{TILE_MARK}{tile}"
        return cached(key) or self._encode(chunk, key)

    def _encode(self, chunk: ctypes.c_void_p, digest: str) -> EncodedImage:
        ctx = self._require_open()
        n_tokens = int(mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk))
        started = time.perf_counter()
        if mtmd_cpp.mtmd_encode_chunk(ctx, chunk) != 0:
            raise BadInputError("the vision encoder failed on this image")
        seconds = time.perf_counter() - started
        pointer = mtmd_cpp.mtmd_get_output_embd(ctx)
        flat = np.ctypeslib.as_array(pointer, shape=(n_tokens * self.n_embd,))
        embeddings = flat.reshape(n_tokens, self.n_embd).copy()
        image_tokens = mtmd_cpp.mtmd_input_chunk_get_tokens_image(chunk)
        base, step = self._positions(image_tokens, n_tokens)
        log.info("encoded image %s: %d tokens in %.2f s", digest[:12], n_tokens, seconds)
        return EncodedImage(
            digest, embeddings, int(mtmd_cpp.mtmd_input_chunk_get_n_pos(chunk)),
            bool(mtmd_cpp.mtmd_decode_use_non_causal(ctx, chunk)), base, step,
        )  # fmt: skip

    def _positions(self, image_tokens: ctypes.c_void_p, n_tokens: int) -> tuple[np.ndarray, ...]:
        """Positions at n_past 0 and 1: mtmd's layouts are affine in n_past, so two suffice."""
        if not self.uses_mrope:
            base = np.arange(n_tokens, dtype=np.int64)[None, :]
            return base, np.ones_like(base)
        at = [
            np.array(
                [_mrope(mtmd_cpp.mtmd_image_tokens_get_decoder_pos(image_tokens, p, i))
                 for i in range(n_tokens)], dtype=np.int64,
            ).T
            for p in (0, 1)
        ]  # fmt: skip
        return at[0], at[1] - at[0]

    def _require_open(self) -> ctypes.c_void_p:
        if self._ctx is None:
            raise RuntimeError("the vision context is closed")
        return self._ctx


def _mrope(pos: mtmd_cpp.mtmd_decoder_pos) -> tuple[int, int, int, int]:
    """llama.cpp's section order for M-RoPE positions: t, y, x, z."""
    return (pos.t, pos.y, pos.x, pos.z)


def _tokenize_error(code: int, markers: int, images: int) -> str:
    if markers != images or code == 1:  # mtmd: 1 = count mismatch (2 in some versions)
        return f"the prompt has {markers} image place(s) but {images} image(s) were given"
    return f"llama.cpp could not preprocess the image(s) (error {code})"
