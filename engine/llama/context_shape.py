"""The shape of a loaded model's one context: how many sequences, how its KV cache is laid out.

Every activity on a loaded model (the conversation on screen, each API client,
each document of a summary job) is a sequence of the one context
llama-cpp-python creates when it loads the model, so there is one KV cache and
one compute buffer to account for, and one llama_decode carries tokens for all
of them. llama-cpp-python 0.3.36 has no parameter for the sequence count or the
KV layout: `Llama.__init__` builds its context parameters from
`llama_cpp.llama_cpp.llama_context_default_params()`, looked up at call time.
For the duration of the load only, and for the loading thread only, that
function is wrapped to ask for `n_seq_max` sequences and the layout (the same
technique as engine.llama.buffer_overrides, which this shares a lock with). A
load that never called it raises, and the loaded model checks the sequence
count llama.cpp reports.

`recreated_context` gives a loaded `Llama` a new context of another shape on the
same weights: the shared pool is sized when an activity needs it
(app.model_lifecycle.resident_model), and creating a context allocates only its
KV cache and compute buffers, so no weight is read again.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import llama_cpp
import llama_cpp._internals as llama_internals
import llama_cpp.llama_cpp as llama_low_level

from engine.llama.buffer_overrides import load_patch_lock


@contextlib.contextmanager
def loading_with_sequences(n_seq_max: int, kv_unified: bool) -> Iterator[None]:
    """Make `llama_cpp.Llama(...)` constructed in this block create a context of
    `n_seq_max` sequences with a unified (shared) or per-sequence KV cache."""
    with load_patch_lock:
        original = llama_low_level.llama_context_default_params
        owner = threading.get_ident()
        applied = 0

        def shaped_defaults() -> llama_low_level.llama_context_params:
            nonlocal applied
            params: llama_low_level.llama_context_params = original()
            if threading.get_ident() == owner:
                params.n_seq_max = n_seq_max
                params.kv_unified = kv_unified
                applied += 1
            return params

        llama_low_level.llama_context_default_params = shaped_defaults
        try:
            yield
        finally:
            llama_low_level.llama_context_default_params = original
        if not applied:
            raise RuntimeError(
                "the context's sequences were not set: nothing in the block called "
                "llama_cpp.llama_cpp.llama_context_default_params() (did llama-cpp-python change?)"
            )


def recreated_context(llm: llama_cpp.Llama, n_ctx: int, n_seq_max: int, kv_unified: bool) -> None:
    """Free `llm`'s context and give it a new one of `n_ctx` cells and `n_seq_max` sequences,
    with every other context parameter as it was (threads, batch sizes, flash attention,
    op offload). The old one goes first, so its cells and compute buffers make room for
    the new; a shape llama.cpp refuses raises ValueError and puts the old shape back.

    llama-cpp-python has no call for this: its `Llama` keeps the context in a private
    attribute, which this and engine.llama.handle are the only modules to read.
    """
    before = llm.context_params
    llm._ctx.close()
    try:
        llm._ctx = _context(llm, before, n_ctx, n_seq_max, kv_unified)
    except ValueError:
        llm._ctx = _context(llm, before, before.n_ctx, before.n_seq_max, before.kv_unified)
        raise


def _context(
    llm: llama_cpp.Llama,
    template: llama_low_level.llama_context_params,
    n_ctx: int,
    n_seq_max: int,
    kv_unified: bool,
) -> llama_internals.LlamaContext:
    params = llama_low_level.llama_context_params.from_buffer_copy(template)
    params.n_ctx, params.n_seq_max, params.kv_unified = n_ctx, n_seq_max, kv_unified
    context = llama_internals.LlamaContext(model=llm._model, params=params, verbose=llm.verbose)
    llm.context_params = params
    return context
