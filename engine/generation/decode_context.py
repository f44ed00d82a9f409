"""A llama context as the scheduler drives it: its sequences, one reusable token batch.

Two kinds exist. The model's own context (created by llama-cpp-python when
it loads the model) holds one sequence of the model's whole n_ctx: the chat
and vision turns of the conversation on screen. A batch job gets a context
of its own on the same weights, so a chat can still run between batch steps
and neither disturbs the other's KV cache. That one holds `n_sequences`
sequences, each in its own KV stream (kv_unified off): attention then reads
only that sequence's cells, so a decode step over 16 sequences costs 16
short attentions, not 16 attentions over everyone's cells (measured here: a
unified cache was slower at 16 sequences, 168 vs 207 tokens/s). The price is
that copying a sequence into another stream copies the whole stream buffer,
which is still far cheaper than evaluating a shared prompt prefix again.

llama.cpp splits a batch over several streams into micro-batches of
consecutive sequence ids, so callers add tokens in increasing sequence order.

A batch context takes the model context's settings, flash attention included
(the plan's choice, carried by engine.llama.load_params.LoadParams), so a
document summarised gives the tokens a chat turn on the same prompt gives.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from typing import Any

import llama_cpp
import numpy as np

from engine.errors import BadInputError
from engine.generation.logprobs import TokenLogprob, log_softmax, top_tokens
from engine.generation.prompt_pieces import EncodedImage
from engine.generation.text_assembly import token_bytes
from engine.generation.token_sampler import TokenSampler
from engine.llama.handle import LlamaHandle
from engine.llama.load_params import CONTEXT_GRANULE, LoadParams, make_llama_kwargs

log = logging.getLogger(__name__)
MAX_SEQUENCES = 64
DECODE_OK = 0
DECODE_ABORTED = 2
_MAX_POSITIONS = 4  # llama.cpp's M-RoPE sections


class DecodeContext:
    """A llama context with n_sequences KV streams, plus one reusable llama_batch."""

    def __init__(
        self, handle: LlamaHandle, context: Any, n_batch: int, n_sequences: int, owned: bool
    ) -> None:
        self.handle = handle
        self.n_batch = n_batch
        self.n_sequences = n_sequences
        self.n_vocab = handle.n_vocab
        self._ctx: Any = context
        self._owned = owned
        self.n_ctx_per_sequence = int(llama_cpp.llama_n_ctx_seq(context))
        self._memory = llama_cpp.llama_get_memory(context)
        self.capacity = n_batch  # llama_decode takes at most n_batch tokens per call
        self._batch = llama_cpp.llama_batch_init(self.capacity, 0, 1)
        self._abort: Any = None

    @classmethod
    def of_model(cls, handle: LlamaHandle, params: LoadParams) -> DecodeContext:
        """The model's own context (one sequence); closing this leaves it to the model."""
        n_batch = int(make_llama_kwargs(params)["n_batch"])
        return cls(handle, handle.context, n_batch, 1, owned=False)

    @classmethod
    def for_sequences(
        cls, handle: LlamaHandle, params: LoadParams, n_sequences: int, n_ctx_per_sequence: int
    ) -> DecodeContext:
        """A new context on the model's weights with `n_sequences` streams of its own."""
        if not 1 <= n_sequences <= MAX_SEQUENCES:
            raise BadInputError(f"a batch holds 1 to {MAX_SEQUENCES} sequences, not {n_sequences}")
        kwargs = make_llama_kwargs(params)
        n_batch = int(kwargs["n_batch"])
        if n_sequences > n_batch:  # llama.cpp reserves one output per sequence in a batch
            raise ValueError(
                f"{n_sequences} sequences need n_batch >= {n_sequences}, not {n_batch}"
            )
        cparams = _context_params(kwargs, n_sequences, _granular(n_ctx_per_sequence))
        context = llama_cpp.llama_init_from_model(handle.model, cparams)
        if not context:
            raise BadInputError(
                f"llama.cpp could not create a batch context of {cparams.n_ctx} KV cells "
                f"({n_sequences} sequences); lower the parallelism or the context per sequence"
            )
        created = cls(handle, context, n_batch, n_sequences, owned=True)
        log.debug(
            "batch context: %d sequences x %d cells, n_batch %d",
            n_sequences, created.n_ctx_per_sequence, n_batch,
        )  # fmt: skip
        return created

    @property
    def closed(self) -> bool:
        return self._ctx is None

    @property
    def n_tokens(self) -> int:
        return int(self._batch.n_tokens)

    def first_position(self) -> int:
        return int(self._batch.pos[0]) if self._batch.n_tokens else 0

    def clear(self) -> None:
        self._batch.n_tokens = 0

    def add(self, token: int, position: int, sequence: int, wants_logits: bool) -> int:
        """Append one token; returns its index in the batch (where its logits will be)."""
        index = int(self._batch.n_tokens)
        if index >= self.capacity:
            raise ValueError(f"the batch is full ({self.capacity} tokens)")
        self._batch.token[index] = token
        self._batch.pos[index] = position
        self._batch.n_seq_id[index] = 1
        self._batch.seq_id[index][0] = sequence
        self._batch.logits[index] = wants_logits
        self._batch.n_tokens = index + 1
        return index

    def decode(self, abort: Callable[[], bool] | None = None) -> int:
        """Run llama_decode on the batch; with `abort`, a long step stops between graph nodes.

        The abort callback is a Python call per graph node, so callers pass
        it only for steps long enough to need it (prompt chunks).
        """
        self._set_abort(abort)
        try:
            return int(llama_cpp.llama_decode(self._require_open(), self._batch))
        finally:
            self._set_abort(None)

    def decode_image(
        self, image: EncodedImage, sequence: int, n_past: int, abort: Callable[[], bool]
    ) -> int:
        """The image's embeddings in n_batch slices at its positions in `sequence`, attending
        both ways when the model wants that (set for the image only); llama_decode's code."""
        ctx = self._require_open()
        positions = image.positions_at(n_past)
        data = np.ascontiguousarray(image.embeddings, dtype=np.float32)
        batch = llama_cpp.llama_batch_ext_init(ctx)
        self._set_abort(abort)
        if image.non_causal:
            llama_cpp.llama_set_causal_attn(ctx, False)
        try:
            for start in range(0, image.n_tokens, self.n_batch):
                llama_cpp.llama_batch_ext_clear(batch)
                for i in range(start, min(start + self.n_batch, image.n_tokens)):
                    row = data[i]
                    embd = llama_cpp.llama_embd(
                        row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, row.size
                    )
                    index = llama_cpp.llama_batch_ext_add_embd(batch, sequence, embd)
                    if index < 0:
                        return int(index)
                    pos = (llama_cpp.llama_pos * _MAX_POSITIONS)(*positions[:, i].tolist())
                    llama_cpp.llama_batch_ext_set_pos(batch, index, pos)
                code = llama_cpp.llama_process(ctx, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, batch)
                if code != DECODE_OK:
                    return int(code)
            return DECODE_OK
        finally:
            if image.non_causal:
                llama_cpp.llama_set_causal_attn(ctx, True)
            self._set_abort(None)
            llama_cpp.llama_batch_ext_free(batch)

    def sample(self, sampler: TokenSampler, index: int) -> int:
        """The next token from the logits at batch `index`, drawn by `sampler`."""
        return sampler.sample(self._require_open(), index)

    def logprob(self, token: int, index: int, n_top: int) -> TokenLogprob:
        """The chosen token's log-probability under the raw logits of batch `index`, and the
        `n_top` most likely tokens'."""
        raw = llama_cpp.llama_get_logits_ith(self._require_open(), index)
        logits = np.ctypeslib.as_array(raw, shape=(self.n_vocab,))
        logprobs = log_softmax(logits)
        vocab = self.handle.vocab
        top = tuple(
            (t, token_bytes(vocab, t), float(logprobs[t])) for t in top_tokens(logprobs, n_top)
        )
        return TokenLogprob(token, token_bytes(vocab, token), float(logprobs[token]), top)

    def forget(self, sequence: int, from_position: int = 0) -> None:
        """Drop a sequence's cells from `from_position` on (all of them by default)."""
        self._require_open()
        llama_cpp.llama_memory_seq_rm(self._memory, sequence, from_position, -1)

    def copy(self, source: int, target: int) -> None:
        """Make `target` hold what `source` holds (a whole-stream copy across KV streams)."""
        self._require_open()
        llama_cpp.llama_memory_seq_rm(self._memory, target, -1, -1)
        llama_cpp.llama_memory_seq_cp(self._memory, source, target, -1, -1)

    def forget_all(self) -> None:
        self._require_open()
        llama_cpp.llama_memory_clear(self._memory, False)

    def close(self) -> None:
        """Free the batch, and an owned context (its KV cache); the model stays loaded."""
        if self._ctx is None:
            return
        llama_cpp.llama_batch_free(self._batch)
        if self._owned:
            llama_cpp.llama_free(self._ctx)
        self._ctx = None
        self._memory = None

    def __enter__(self) -> DecodeContext:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _require_open(self) -> Any:
        if self._ctx is None:
            raise RuntimeError("the decode context is closed")
        return self._ctx

    def _set_abort(self, abort: Callable[[], bool] | None) -> None:
        if abort is None and self._abort is None:
            return
        ctx = self._require_open()
        if abort is None:
            self._abort = None
            llama_cpp.llama_set_abort_callback(
                ctx, llama_cpp.ggml_abort_callback(0), ctypes.c_void_p(0)
            )
            return
        # kept on self: ctypes must not collect the callback while llama.cpp holds it
        self._abort = llama_cpp.ggml_abort_callback(lambda _data: abort())
        llama_cpp.llama_set_abort_callback(ctx, self._abort, ctypes.c_void_p(0))


def _granular(n_ctx: int) -> int:
    """llama.cpp pads context sizes to its granule; ask for what it will allocate."""
    return -(-max(n_ctx, 1) // CONTEXT_GRANULE) * CONTEXT_GRANULE


def _context_params(
    kwargs: dict[str, Any], n_sequences: int, n_ctx_per_sequence: int
) -> llama_cpp.llama_context_params:
    params: llama_cpp.llama_context_params = llama_cpp.llama_context_default_params()
    params.n_ctx = n_ctx_per_sequence * n_sequences
    params.n_seq_max = n_sequences
    params.n_batch = kwargs["n_batch"]
    params.n_ubatch = kwargs["n_ubatch"]
    params.n_threads = kwargs["n_threads"]
    params.n_threads_batch = kwargs["n_threads_batch"]
    params.flash_attn_type = (
        llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        if kwargs["flash_attn"]
        else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    params.kv_unified = False  # one stream per sequence: attention reads only its own cells
    params.no_perf = True
    return params
