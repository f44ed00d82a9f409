"""Image Q&A with the resident model and its vision projector, under the plan's VLMOpt options.

A turn: images are encoded by the projector (only those not encoded before:
embeddings are cached in host memory by the digest of their pixels), the
encoder is freed when the plan says the encoder and the language model must
not be resident together, then the language model evaluates the prompt (text
runs and image embeddings, reusing what its KV cache already holds) and
generates the reply. `events` records that order, for the CLI and the tests.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from engine.cancel import CancelToken
from engine.errors import BadInputError
from engine.generation.prompt_pieces import TILE_MARK, EncodedImage, Piece
from engine.generation.replies import generate
from engine.generation.sampling import SamplingSettings
from engine.generation.stats import GenerationResponse
from engine.generation.stream import StreamRequest
from engine.model.chat_template import RenderedPrompt
from engine.model.image_input import ImageFile, RgbImage, decode_image
from engine.runtime.loaded_model import LoadedModel
from engine.vision.options import VisionOptions
from engine.vision.projector import projector_facts

if TYPE_CHECKING:
    from engine.vision.mtmd_context import MtmdContext

log = logging.getLogger(__name__)

DEFAULT_CACHE_BYTES = 512 * 2**20  # embeddings of a few dozen large images
DECODED_KEPT = 64  # decoded pixels kept for the next turns (the history's images)
GUESSED_IMAGE_TOKENS = 256  # before the first encode: Gemma 3's fixed count, a typical size


class VisionRuntime:
    """The projector of the resident model; one per loaded model + projector pair."""

    def __init__(
        self,
        model: LoadedModel,
        mmproj_path: str,
        options: VisionOptions | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        check_projector_matches(mmproj_path, model)
        self.model = model
        self.mmproj_path = mmproj_path
        self.options = options or VisionOptions()
        self.events: list[str] = []
        self._encoder: MtmdContext | None = None
        self._cache: OrderedDict[str, EncodedImage] = OrderedDict()
        self._decoded: OrderedDict[str, RgbImage] = OrderedDict()  # by ImageFile.key
        self._image_tokens: dict[str, int] = {}  # by pixel digest: tokens of all its tiles
        self._cache_bytes = cache_bytes
        self.images_encoded = 0

    @property
    def encoder_open(self) -> bool:
        return self._encoder is not None

    def cached(self, digest: str) -> EncodedImage | None:
        image = self._cache.get(digest)
        if image is not None:
            self._cache.move_to_end(digest)
        return image

    def decoded(self, image: ImageFile) -> RgbImage:
        """The image's pixels at the size the plan allows (BadInputError: why not usable)."""
        rgb = self._decoded.get(image.key)
        if rgb is None:
            rgb = decode_image(image.data, image.name, self.options.max_side_px)
            self._decoded[image.key] = rgb
            while len(self._decoded) > DECODED_KEPT:
                self._decoded.popitem(last=False)
        return rgb

    def tokens_for(self, image: ImageFile) -> int:
        """The image's token count (all its tiles) once encoded, else the largest seen so far
        (or a guess)."""
        known = self._image_tokens.get(self.decoded(image).digest)
        if known is not None:
            return known
        return max(self._image_tokens.values(), default=GUESSED_IMAGE_TOKENS)

    def request_for(
        self,
        prompt: RenderedPrompt,
        images: Sequence[ImageFile],
        settings: SamplingSettings,
        cancel: CancelToken,
        reuse_cache: bool = True,
    ) -> StreamRequest:
        """The stream request of a rendered prompt whose image markers stand for `images`
        (new images encoded here)."""
        add_bos = not prompt.template_adds_bos and self.model.wants_bos()
        decoded = [self.decoded(image) for image in images]
        pieces = self.prepare_for_decode(prompt.text, decoded, add_bos)
        self.events.append("language decode started")
        return StreamRequest(tuple(pieces), settings, prompt.stop, cancel, reuse_cache=reuse_cache)

    def stream_reply(
        self,
        prompt: RenderedPrompt,
        images: Sequence[ImageFile],
        settings: SamplingSettings,
        cancel: CancelToken,
        reuse_cache: bool = True,
    ) -> Iterator[GenerationResponse]:
        """Stream the reply alone in the conversation's sequence (nothing else running)."""
        request = self.request_for(prompt, images, settings, cancel, reuse_cache)
        yield from generate(self.model.scheduler, request, self.model.params.seed)

    def prepare_for_decode(
        self, text: str, images: Sequence[RgbImage], add_bos: bool = False
    ) -> list[Piece]:
        """`prepare`, then the encoder freed where the plan wants its room for decoding."""
        pieces = self.prepare(text, images, add_bos)
        if self.options.free_after_encode:
            self.close_encoder()
        return pieces

    def prepare(self, text: str, images: Sequence[RgbImage], add_bos: bool = False) -> list[Piece]:
        """Text runs and encoded images, encoding (and caching) only new images.

        mtmd needs its context even to tokenize (preprocessing decides each image's
        token count); when every image is cached and the plan frees the encoder,
        the context is opened on the CPU only, so it takes no VRAM.
        """
        all_cached = all(image.digest in self._cache for image in images)
        encoder = self._open_encoder(on_gpu=self.options.encoder_on_gpu and not all_cached)
        pieces = encoder.prepare(text, images, self.cached, add_special=add_bos)
        tokens: Counter[str] = Counter()  # per image (all its tiles), this prompt
        new: set[str] = set()
        for piece in pieces:
            if not isinstance(piece, EncodedImage):
                continue
            image = piece.digest.partition(TILE_MARK)[0]
            tokens[image] += piece.n_tokens
            if piece.digest in self._cache:
                continue
            self._remember(piece)
            new.add(image)
        for image in sorted(new):
            self.images_encoded += 1
            self.events.append(f"encoded {image[:12]} ({tokens[image]} tokens)")
        if len(images) > len(new):  # occurrences served from the cache (or this prompt)
            self.events.append(f"reused {len(images) - len(new)} cached image(s)")
        self._image_tokens.update(tokens)
        return pieces

    def close_encoder(self) -> None:
        """Free the vision context (its weights and buffers); embeddings stay cached."""
        if self._encoder is not None:
            self._encoder.close()
            self._encoder = None
            self.events.append("vision context freed")
            log.info("vision context freed before decoding")

    def close(self) -> None:
        """Free the encoder; call before the model's context goes."""
        self.close_encoder()
        self._cache.clear()

    def _open_encoder(self, on_gpu: bool) -> MtmdContext:
        if self._encoder is not None and self._encoder.on_gpu != on_gpu and on_gpu:
            self.close_encoder()  # a CPU-only context that now has images to encode
        if self._encoder is None:
            # imported with the first image: loading mtmd's library and declaring its calls
            # costs 20 ms that every start-up of the window would otherwise pay
            from engine.vision.mtmd_context import MtmdContext

            options = replace(self.options, encoder_on_gpu=on_gpu)
            handle = self.model.handle
            self._encoder = MtmdContext(
                handle.model, self.mmproj_path, options, handle.n_threads_batch
            )
            self.events.append(f"vision context opened on the {'GPU' if on_gpu else 'CPU'}")
        return self._encoder

    def _remember(self, image: EncodedImage) -> None:
        self._cache[image.digest] = image
        while len(self._cache) > 1 and sum(i.nbytes for i in self._cache.values()) > (
            self._cache_bytes
        ):
            self._cache.popitem(last=False)


def attach_projector(
    model: LoadedModel, mmproj_path: str, options: VisionOptions | None = None
) -> VisionRuntime:
    """Give the resident model its projector (replacing any other); it sees images from now on."""
    if model.vision is not None:
        model.vision.close()
        model.vision = None
    model.vision = VisionRuntime(model, mmproj_path, options)
    return model.vision


def check_projector_matches(mmproj_path: str, model: LoadedModel) -> None:
    """Refuse a projector that is not one, or whose output width is not the model's input
    (before mtmd, which leaks the loaded encoder when it refuses a pair)."""
    width = projector_facts(mmproj_path).out_dim  # ModelFileError: not a projector
    wanted = model.handle.n_embd_inp
    if width and width != wanted:
        raise BadInputError(
            f"{mmproj_path}: this projector was made for another model (it outputs "
            f"{width}-wide embeddings; {model.inventory.name or 'the model'} takes {wanted})"
        )
