"""One resident llama.cpp model: loading it with explicit parameters, and its tokenizer.

The engine worker owns exactly one `LoadedModel` at a time. Loading checks
the file first (so bad input gets one clear sentence, not a llama.cpp
assertion), routes llama.cpp's log into Python logging, and reads the
inventory that later issues plan with.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import time
from collections.abc import Sequence
from typing import Protocol

import llama_cpp

from engine.cancel import CancelToken
from engine.errors import BadInputError, ModelFileError
from engine.generation.decode_context import DecodeContext
from engine.generation.prompt_pieces import Piece
from engine.generation.sampling import SamplingSettings
from engine.generation.scheduler import Scheduler
from engine.generation.stream import StreamRequest
from engine.llama import backends, offload_boundary, prefetch
from engine.llama import log_capture as llama_log
from engine.llama.buffer_overrides import TensorOverrides, loading_with_overrides
from engine.llama.context_shape import loading_with_sequences, recreated_context
from engine.llama.handle import LlamaHandle
from engine.llama.load_params import LoadParams, make_llama_kwargs
from engine.llama.rpc_devices import rpc_server_devices
from engine.llama.vocabulary import VocabularyFacts, read_vocabulary, vocabulary_facts
from engine.model.chat_message import ChatMessage
from engine.model.chat_template import ChatTemplate, RenderedPrompt
from engine.model.gguf_file import check_model_path
from engine.model.image_input import ImageFile, RgbImage
from engine.model.inventory import ModelInventory, read_inventory
from engine.model.model_purpose import ModelPurpose, judge_purpose, purpose_of_file
from engine.model.prompt_format import AUTO, FAMILY_MARKERS, PromptFormat

log = logging.getLogger(__name__)


class ModelVision(Protocol):
    """What a loaded model's vision half (engine.vision.runtime) offers a conversation.

    A protocol, so that the runtime does not depend on the vision runtime that
    depends on it."""

    def decoded(self, image: ImageFile) -> RgbImage: ...

    def tokens_for(self, image: ImageFile) -> int: ...

    def prepare_for_decode(
        self, text: str, images: Sequence[RgbImage], add_bos: bool = False
    ) -> list[Piece]: ...

    def request_for(
        self,
        prompt: RenderedPrompt,
        images: Sequence[ImageFile],
        settings: SamplingSettings,
        cancel: CancelToken,
        reuse_cache: bool = True,
    ) -> StreamRequest: ...

    def close(self) -> None: ...


class LoadedModel:
    """A llama.cpp model and its one context plus what we know about them; close() frees both.

    Its scheduler runs every stream on the model in that context: the
    conversation's turns (text and vision) in sequence 0 with the window the user
    chose, API clients and a job's documents in the parallel sequences, which
    share the rest of the KV cache (engine.llama.context_shape)."""

    def __init__(
        self,
        params: LoadParams,
        llm: llama_cpp.Llama,
        inventory: ModelInventory,
        prompt_format: str = AUTO,
    ):
        self.params = params
        self.llm = llm
        self.handle = LlamaHandle.of(llm)
        self.inventory = inventory
        facts = vocabulary_facts(self.handle.model, self.handle.vocab, FAMILY_MARKERS)
        self.purpose = purpose_of(facts, params.model_path)  # base or chat (model_purpose)
        self.chat_template = chat_template_for(facts, prompt_format, self.purpose)
        self.scheduler = Scheduler(DecodeContext.of_model(self.handle, params))
        self.vision: ModelVision | None = None  # set by vision_runtime.attach_projector

    @property
    def n_ctx(self) -> int:
        """The conversation's window."""
        return self.scheduler.room(0)

    @property
    def pool_cells(self) -> int:
        """The most cells a sequence beside the conversation may hold; 0 while the context
        has no shared pool (none is made before an activity needs it)."""
        return self.scheduler.room(1)

    @property
    def prompt_format(self) -> PromptFormat:
        """Which prompt format renders this model's conversations, and why."""
        return self.chat_template.format

    def use_prompt_format(self, requested: str) -> PromptFormat:
        """Switch the prompt format (auto, template, completion or a llama.cpp built-in
        name); BadInputError for a name that is not one, and the format stays as it was."""
        self.chat_template = self.chat_template.with_format(requested)
        return self.chat_template.format

    def tokenize_prompt(self, prompt: RenderedPrompt) -> list[int]:
        """Tokens of a rendered prompt; BOS is added unless the template wrote it.

        A model without a tokenizer (llama.cpp's "none" vocabulary, as the profiler's
        micro-models have) is refused here: llama_tokenize aborts the process on it.
        """
        add_bos = not prompt.template_adds_bos and self.wants_bos()
        return self.tokenize_text(prompt.text, add_bos=add_bos, special=True)

    def tokenize_text(self, text: str, add_bos: bool = False, special: bool = False) -> list[int]:
        """Tokens of plain text, refused (BadInputError) by a model without a tokenizer."""
        if llama_cpp.llama_vocab_type(self.handle.vocab) == llama_cpp.LLAMA_VOCAB_TYPE_NONE:
            raise BadInputError(
                f"{self.inventory.name} has no tokenizer, so it cannot read text; "
                "choose a chat model"
            )
        return self.llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)

    def count_tokens(self, messages: Sequence[ChatMessage]) -> int:
        return len(self.tokenize_prompt(self.chat_template.render(messages)))

    def reshape(self, n_parallel: int, n_ctx_shared: int) -> float:
        """Re-create the one context with `n_parallel` sequences beside the conversation sharing
        `n_ctx_shared` cells, the weights staying where they are; the seconds it took.

        The shared pool exists only while an activity needs it (the API's clients, a
        summary job), so a chat alone leaves its cells to weights. Every sequence's
        cache starts empty: the conversation is evaluated again at its next turn.
        ModelFileError when llama.cpp cannot make the new context (the old shape is
        back then). Only between steps, with no stream running.
        """
        params = self.params.with_changes(n_parallel=n_parallel, n_ctx_shared=n_ctx_shared)
        if self.scheduler.context_in_use():
            raise RuntimeError("the context is reshaped only while no stream runs in it")
        started = time.perf_counter()
        self.scheduler.context.close()
        try:
            with (
                llama_log.errors_logged() as errors,
                prefetch.slots_for_contexts(params.prefetch_slots),
            ):
                recreated_context(
                    self.llm, params.total_cells, params.n_sequences, params.kv_unified
                )
        except ValueError as exc:
            self._run_in_context(self.params)
            why = errors.reason or str(exc)
            raise ModelFileError(
                f"llama.cpp could not make a context of that shape ({why})"
            ) from exc
        self._run_in_context(params)
        seconds = time.perf_counter() - started
        log.info("context reshaped in %.3f s: %d sequences, %d shared cells", seconds,
                 params.n_sequences, params.n_ctx_shared)  # fmt: skip
        return seconds

    def _run_in_context(self, params: LoadParams) -> None:
        """Drive the model's (new) context, shaped by `params`."""
        self.handle = LlamaHandle.of(self.llm)
        self.scheduler.use_context(DecodeContext.of_model(self.handle, params))
        self.params = params

    def close(self) -> None:
        if self.vision is not None:
            self.vision.close()
            self.vision = None
        self.scheduler.context.close()
        self.llm.close()

    def wants_bos(self) -> bool:
        return self.handle.wants_bos()


def load_model(params: LoadParams, prompt_format: str = AUTO) -> LoadedModel:
    """Load a GGUF with exactly these parameters; ModelFileError if it is not a usable model.

    `prompt_format`: the model's prompt-format setting (engine.model.prompt_format)."""
    path = check_model_path(params.model_path)
    inventory = inspect_model(path)
    llama_log.install()
    params = _within_trained_context(params, inventory)
    started = time.perf_counter()
    set_op_offload_boundary(params.op_offload_min_batch)
    backends.start_ggml()
    overrides = TensorOverrides(params.tensor_overrides) if params.tensor_overrides else None
    devices = rpc_server_devices(params.rpc_servers) if params.rpc_servers else None
    chatter = io.StringIO()
    try:
        with (
            contextlib.redirect_stderr(chatter),
            llama_log.errors_logged() as errors,
            loading_with_overrides(overrides, devices),
            loading_with_sequences(params.n_sequences, params.kv_unified),
            prefetch.slots_for_contexts(params.prefetch_slots),
        ):
            llm = llama_cpp.Llama(**make_llama_kwargs(params))
    except (ValueError, RuntimeError, OSError) as exc:
        why = errors.reason or str(exc)  # llama-cpp-python's own says only "Failed to load"
        raise ModelFileError(f"{path}: llama.cpp could not load the model ({why})") from exc
    finally:
        log.debug("llama-cpp-python said while loading: %s", chatter.getvalue())
    llm.verbose = False  # no per-turn prints to stderr from here on
    log.info("loaded %s in %.2f s with %s", path.name, time.perf_counter() - started, params)
    try:
        return LoadedModel(params, llm, inventory, prompt_format)
    except BaseException:
        llm.close()  # a refused prompt format frees the model it came with
        raise


def set_op_offload_boundary(min_batch: int | None) -> None:
    """Ask the GPU backend to stream from `min_batch` tokens per step
    (engine.llama.offload_boundary)."""
    if min_batch is not None:
        offload_boundary.request(min_batch)


def inspect_model(path: str | os.PathLike[str]) -> ModelInventory:
    """Check that a file is a loadable language model, without loading it."""
    inventory = read_inventory(path)
    if inventory.is_vision_projector:
        raise ModelFileError(
            f"{path}: is a vision projector (mmproj), not a language model; load the model it "
            "belongs to"
        )
    return inventory


def _within_trained_context(params: LoadParams, inventory: ModelInventory) -> LoadParams:
    """A context longer than the model was trained for only produces garbage; cap it."""
    trained = inventory.context_length
    if trained and params.n_ctx > trained:
        log.warning("n_ctx %d exceeds the trained context %d; using that", params.n_ctx, trained)
        return params.with_changes(n_ctx=trained)
    return params


def chat_template_for(
    facts: VocabularyFacts, prompt_format: str = AUTO, purpose: ModelPurpose | None = None
) -> ChatTemplate:
    """The model's ChatTemplate under its prompt-format setting."""
    return ChatTemplate(
        facts.chat_template,
        facts.bos_token,
        facts.eos_token,
        special_tokens=facts.special_tokens,
        requested=prompt_format,
        purpose=purpose,
    )


def prompt_format_of_file(path: str | os.PathLike[str], prompt_format: str = AUTO) -> PromptFormat:
    """The prompt format a model would load with, reading only its vocabulary and header."""
    checked = check_model_path(path)
    facts = read_vocabulary(checked, FAMILY_MARKERS)
    return chat_template_for(facts, prompt_format, purpose_of(facts, checked)).format


def purpose_of(facts: VocabularyFacts, path: str | os.PathLike[str]) -> ModelPurpose:
    """What the model was trained for. A chat template settles it, so a model that has one
    (most do, the built-in one too) does not read its header a second time at every load."""
    if facts.chat_template:
        return judge_purpose(True, {})
    return purpose_of_file(path)
