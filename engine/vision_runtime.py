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

import llama_cpp

from engine.cancel import CancelToken
from engine.chat_template import RenderedPrompt
from engine.errors import BadInputError
from engine.generation import TextAssembler, TurnClock, abort_prompt_on, token_bytes
from engine.generation_stats import FinishReason, GenerationResponse
from engine.image_input import ImageFile, RgbImage, decode_image
from engine.mtmd_context import TILE_MARK, EncodedImage, MtmdContext, Piece
from engine.multimodal_decode import DecodeError, PromptDecoder
from engine.runtime import LoadedModel
from engine.sampling import SamplingSettings
from engine.token_sampler import TokenSampler
from engine.vision_options import VisionOptions
from engine.vision_plan import projector_facts

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
        self._decoder = PromptDecoder(model.llm._ctx.ctx, model.params.n_batch)
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

    def stream_reply(
        self,
        prompt: RenderedPrompt,
        images: Sequence[ImageFile],
        settings: SamplingSettings,
        cancel: CancelToken,
    ) -> Iterator[GenerationResponse]:
        """Stream the reply to a rendered prompt whose image markers stand for `images`."""
        add_bos = not prompt.template_adds_bos and self.model.wants_bos()
        pieces = self.prepare(prompt.text, [self.decoded(image) for image in images], add_bos)
        if self.options.free_after_encode:
            self.close_encoder()
        yield from self._generate(pieces, prompt.stop, settings, cancel)

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

    def forget_cache(self) -> None:
        """The model's context was used by the text path: its KV cache is not ours any more."""
        self._decoder.forget()

    def close(self) -> None:
        """Free the encoder and the decoder's batch; call before the model's context goes."""
        self.close_encoder()
        self._decoder.close()
        self._cache.clear()

    def _open_encoder(self, on_gpu: bool) -> MtmdContext:
        if self._encoder is not None and self._encoder.on_gpu != on_gpu and on_gpu:
            self.close_encoder()  # a CPU-only context that now has images to encode
        if self._encoder is None:
            options = replace(self.options, encoder_on_gpu=on_gpu)
            threads = llama_cpp.llama_n_threads_batch(self.model.llm._ctx.ctx)
            self._encoder = MtmdContext(
                self.model.llm._model.model, self.mmproj_path, options, threads
            )
            self.events.append(f"vision context opened on the {'GPU' if on_gpu else 'CPU'}")
        return self._encoder

    def _remember(self, image: EncodedImage) -> None:
        self._cache[image.digest] = image
        while len(self._cache) > 1 and sum(i.nbytes for i in self._cache.values()) > (
            self._cache_bytes
        ):
            self._cache.popitem(last=False)

    def _generate(
        self,
        pieces: list[Piece],
        stop: Sequence[str],
        settings: SamplingSettings,
        cancel: CancelToken,
    ) -> Iterator[GenerationResponse]:
        llm = self.model.llm
        llm.reset()  # the text path must not trust its own record of this context any more
        n_ctx = llm.n_ctx()
        total = sum(_size(p) for p in pieces)
        if total + 1 >= n_ctx:
            raise BadInputError(
                f"the prompt with its images takes {total} tokens; the context holds {n_ctx}"
            )
        self.events.append("language decode started")
        clock = TurnClock(prompt_tokens=total, reused=0)
        try:
            with abort_prompt_on(llm, cancel):
                _, clock.reused = self._decoder.decode(pieces)
        except DecodeError as exc:
            if cancel.cancelled:
                stats = clock.stats(FinishReason.CANCELLED)
                yield GenerationResponse("", 0, FinishReason.CANCELLED, stats)
                return
            raise BadInputError(f"llama.cpp could not evaluate the prompt ({exc})") from exc
        log.info("prompt: %d tokens, %d reused from the cache", total, clock.reused)
        n_vocab = llama_cpp.llama_vocab_n_tokens(self.model.llm._model.vocab)
        with TokenSampler(settings, n_vocab, self.model.params.seed) as sampler:
            yield from self._sampled(sampler, clock, stop, settings, cancel, n_ctx)

    def _sampled(
        self,
        sampler: TokenSampler,
        clock: TurnClock,
        stop: Sequence[str],
        settings: SamplingSettings,
        cancel: CancelToken,
        n_ctx: int,
    ) -> Iterator[GenerationResponse]:
        llm = self.model.llm
        vocab = llm._model.vocab
        text = TextAssembler(stop)
        finish = FinishReason.CANCELLED
        while not cancel.cancelled:
            token = sampler.sample(llm._ctx.ctx, -1)
            clock.token()
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                finish = FinishReason.STOP
                break
            piece = text.feed(token_bytes(vocab, token))
            if text.stopped:
                finish = FinishReason.STOP
            elif clock.generated >= settings.max_tokens:
                finish = FinishReason.LENGTH
            elif self._decoder.n_past + 1 >= n_ctx:
                finish = FinishReason.CONTEXT
            if piece:
                yield GenerationResponse(piece, clock.generated)
            if finish is not FinishReason.CANCELLED:
                break
            try:
                self._decoder.add_token(token)
            except DecodeError as exc:
                raise BadInputError(f"llama.cpp failed while generating ({exc})") from exc
        yield GenerationResponse(text.flush(), clock.generated, finish, clock.stats(finish))


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
    wanted = llama_cpp.llama_model_n_embd_inp(model.llm._model.model)
    if width and width != int(wanted):
        raise BadInputError(
            f"{mmproj_path}: this projector was made for another model (it outputs "
            f"{width}-wide embeddings; {model.inventory.name or 'the model'} takes {wanted})"
        )


def _size(piece: Piece) -> int:
    return piece.n_tokens if isinstance(piece, EncodedImage) else len(piece.tokens)
