"""A loaded model's one llama context as the scheduler drives it: its sequences, one batch.

Sequence 0 is the conversation on screen, with the window the user chose;
sequences 1..n_parallel serve API clients and a summary job's documents; the
last one holds a batch job's shared prompt opening, which the others copy. The
KV cache is one pool of cells every sequence shares (kv_unified, see
engine.llama.load_params.KV_LAYOUT): copying a sequence shares its cells
instead of copying them, and the parallel sequences draw on the cells beyond
the conversation's window as their prompts and replies need them.

A headless server's context is laid out with a stream per sequence instead
(kv_unified off, engine.llama.load_params.KV_LAYOUT), each the conversation's
size: no pool, each sequence's room its stream. There llama.cpp splits a batch
over several streams into micro-batches of consecutive sequence ids, so callers
add tokens in increasing sequence order (harmless in the unified layout).
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any

import llama_cpp
import numpy as np

from engine.generation.logprobs import TokenLogprob, log_softmax, top_tokens
from engine.generation.prompt_pieces import EncodedImage
from engine.generation.text_assembly import token_bytes
from engine.generation.token_sampler import TokenSampler
from engine.llama.abort_flag import AbortFlag
from engine.llama.handle import LlamaHandle
from engine.llama.load_params import LoadParams, make_llama_kwargs, padded_cells

log = logging.getLogger(__name__)
DECODE_OK = 0
DECODE_ABORTED = 2
_MAX_POSITIONS = 4  # llama.cpp's M-RoPE sections


class DecodeContext:
    """A llama context with n_sequences KV streams, plus one reusable llama_batch."""

    def __init__(
        self,
        handle: LlamaHandle,
        context: Any,
        n_batch: int,
        rooms: list[int],
        shared: int,
        unified: bool = True,
    ) -> None:
        self.handle = handle
        self.n_batch = n_batch
        self.n_sequences = len(rooms)
        self.rooms = rooms  # the most cells each sequence may hold
        self.shared_cells = shared  # what sequences 1.. share (0 while no activity needs them)
        self.unified = unified  # False: each sequence has a stream of its own, no pool
        self.n_vocab = handle.n_vocab
        self._ctx: Any = context
        self._memory = llama_cpp.llama_get_memory(context)
        self.capacity = n_batch  # llama_decode takes at most n_batch tokens per call
        self._batch = llama_cpp.llama_batch_init(self.capacity, 0, 1)
        self._abort: AbortFlag | None = None

    @classmethod
    def of_model(cls, handle: LlamaHandle, params: LoadParams) -> DecodeContext:
        """The model's one context, shaped at load (engine.llama.context_shape); closing
        this leaves it to the model."""
        n_batch = int(make_llama_kwargs(params)["n_batch"])
        n_sequences = int(llama_cpp.llama_n_seq_max(handle.context))
        if n_sequences != params.n_sequences:
            raise RuntimeError(
                f"llama.cpp made {n_sequences} sequences, not the {params.n_sequences} asked for"
            )
        if params.kv_unified:
            shared = padded_cells(params.n_ctx_shared)
            rooms = [params.conversation_cells] + [shared] * (n_sequences - 1)
        else:
            stream = int(llama_cpp.llama_n_ctx_seq(handle.context))
            rooms, shared = [stream] * n_sequences, 0
        log.debug("context: %d sequences, rooms %s, n_batch %d", n_sequences, rooms, n_batch)
        return cls(handle, handle.context, n_batch, rooms, shared, params.kv_unified)

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

    def decode(self, abort: AbortFlag | None = None) -> int:
        """Run llama_decode on the batch; with `abort`, a long step stops between graph nodes
        once the flag is raised. Callers pass one only for steps long enough to need it
        (prompt chunks): watching the streams' cancel tokens costs a little Python."""
        self._set_abort(abort)
        try:
            return int(llama_cpp.llama_decode(self._require_open(), self._batch))
        finally:
            self._set_abort(None)

    def decode_image(
        self, image: EncodedImage, sequence: int, n_past: int, abort: AbortFlag | None
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

    def last_position(self, sequence: int) -> int:
        """The highest position `sequence` holds in the KV cache (-1 when it holds none):
        what llama.cpp has computed, whatever the scheduler has planned."""
        self._require_open()
        return int(llama_cpp.llama_memory_seq_pos_max(self._memory, sequence))

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
        """Free the batch; the context is the model's, freed with it."""
        if self._ctx is None:
            return
        llama_cpp.llama_batch_free(self._batch)
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

    def _set_abort(self, abort: AbortFlag | None) -> None:
        if abort is None and self._abort is None:
            return
        ctx = self._require_open()
        self._abort = abort  # kept while llama.cpp holds its address
        if abort is None:
            llama_cpp.llama_set_abort_callback(
                ctx, llama_cpp.ggml_abort_callback(0), ctypes.c_void_p(0)
            )
            return
        llama_cpp.llama_set_abort_callback(ctx, abort.callback, abort.data)
