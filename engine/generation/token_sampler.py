"""Choosing each sequence's next token: llama.cpp's sampler chain, one per sequence.

Every stream the scheduler runs (a chat turn, a vision turn, a document of a
batch job) draws its tokens through one of these, built from its
`SamplingSettings` in llama.cpp's own order (common/sampling.cpp): the
penalties (repeat, frequency, presence) over the reply's last tokens, DRY,
then greedy at temperature 0, else top-k, typical (off), top-p, min-p,
temperature and a seeded draw. The same settings therefore sample alike
whether or not an image joined the conversation or a document is summarised.

A chain keeps state (the penalties' recent tokens, DRY's history, the random
stream), so each sequence gets its own and frees it when it ends. A reply held
to a grammar (JSON output, a forced tool call) has a grammar sampler beside the
chain, consulted as llama.cpp's common sampler does (see `sample`).
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import llama_cpp
import numpy as np

from engine.errors import BadInputError
from engine.generation.sampling import WHOLE_CONTEXT, SamplingSettings
from engine.llama.handle import LlamaHandle

DRY_SEQUENCE_BREAKERS = ("\n", ":", '"', "*")  # llama.cpp's defaults: DRY restarts at these
_MIN_KEEP = 1
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class TokenSampler:
    """llama.cpp's sampler chain for one sequence; close() frees it.

    `n_ctx` is what a penalty window of -1 (the whole context) means; `seed`
    is used unless the settings name one."""

    def __init__(
        self,
        settings: SamplingSettings,
        handle: LlamaHandle,
        seed: int,
        n_ctx: int,
        grammar: str | None = None,
    ) -> None:
        self._grammar = _grammar(grammar, handle) if grammar is not None else None  # may refuse
        self._n_vocab = handle.n_vocab
        chosen_seed = seed if settings.seed is None else settings.seed
        params = llama_cpp.llama_sampler_chain_default_params()
        self._chain: llama_cpp.llama_sampler_p | None = llama_cpp.llama_sampler_chain_init(params)
        for stage in _stages(settings, handle, chosen_seed, n_ctx):
            llama_cpp.llama_sampler_chain_add(self._chain, stage)  # the chain owns the stage
        self._candidates = _Candidates(handle.n_vocab) if grammar is not None else None

    def sample(self, ctx: ctypes.c_void_p, index: int) -> int:
        """The next token from the logits of batch `index` (-1: the last) of `ctx`'s last
        decode; the chain (and the grammar) take it into their history.

        With a grammar, as llama.cpp's own sampler does: the chain draws from the raw
        logits and only a token the grammar refuses makes it draw again with the grammar
        applied to the whole vocabulary, which costs a pass of the grammar over every
        token (measured with the default model: JSON output decoded at 0.63x the free
        speed with the grammar over every token, at 1.08x this way)."""
        if self._chain is None:
            raise RuntimeError("the sampler is closed")
        if self._grammar is None or self._candidates is None:
            return int(llama_cpp.llama_sampler_sample(self._chain, ctx, index))
        logits = llama_cpp.llama_get_logits_ith(ctx, index)
        candidates = self._candidates.fill(logits)
        llama_cpp.llama_sampler_apply(self._chain, candidates)
        token = self._candidates.selected()
        if not self._allows(token):
            candidates = self._candidates.fill(logits)
            llama_cpp.llama_sampler_apply(self._grammar, candidates)
            llama_cpp.llama_sampler_apply(self._chain, candidates)
            token = self._candidates.selected()
        llama_cpp.llama_sampler_accept(self._grammar, token)
        llama_cpp.llama_sampler_accept(self._chain, token)
        return token

    def _allows(self, token: int) -> bool:
        """Whether the grammar, as it stands, lets `token` come next."""
        assert self._grammar is not None
        one = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
        single = llama_cpp.llama_token_data_array(one, 1, -1, False)
        llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(single))
        return math.isfinite(one[0].logit)

    def close(self) -> None:
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None
        if self._grammar is not None:
            llama_cpp.llama_sampler_free(self._grammar)
            self._grammar = None

    def __enter__(self) -> TokenSampler:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _stages(
    settings: SamplingSettings, handle: LlamaHandle, seed: int, n_ctx: int
) -> list[llama_cpp.llama_sampler_p]:
    """The chain's samplers in llama.cpp's order; disabled ones cost nothing (llama.cpp
    makes an empty stage of a penalty that changes nothing)."""
    s = settings
    stages = [
        llama_cpp.llama_sampler_init_penalties(
            handle.n_vocab,
            _window(s.repeat_last_n, n_ctx),
            s.repeat_penalty,
            s.frequency_penalty,
            s.presence_penalty,
        )
    ]
    if s.uses_dry:
        stages.append(_dry(s, handle, n_ctx))
    if s.is_greedy:
        return [*stages, llama_cpp.llama_sampler_init_greedy()]
    return [
        *stages,
        llama_cpp.llama_sampler_init_top_k(s.top_k),
        llama_cpp.llama_sampler_init_typical(1.0, _MIN_KEEP),
        llama_cpp.llama_sampler_init_top_p(s.top_p, _MIN_KEEP),
        llama_cpp.llama_sampler_init_min_p(s.min_p, _MIN_KEEP),
        llama_cpp.llama_sampler_init_temp(s.temperature),
        llama_cpp.llama_sampler_init_dist(seed),
    ]


class _Candidates:
    """The vocabulary as llama.cpp's candidate array (id, logit, p), in one reusable buffer."""

    def __init__(self, n_vocab: int) -> None:
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._data = np.zeros(n_vocab, dtype=_TOKEN_DATA)
        self._pointer = self._data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data))
        self._array = llama_cpp.llama_token_data_array(self._pointer, n_vocab, -1, False)

    def fill(self, logits: Any) -> Any:
        """A pointer to the array holding these logits, every token a candidate again (the
        chain sorts and cuts the array in place)."""
        n_vocab = self._ids.size
        self._data["id"] = self._ids
        self._data["logit"] = np.ctypeslib.as_array(logits, shape=(n_vocab,))
        self._data["p"] = 0.0
        self._array = llama_cpp.llama_token_data_array(self._pointer, n_vocab, -1, False)
        return ctypes.byref(self._array)

    def selected(self) -> int:
        """The token the chain last applied chose."""
        at = int(self._array.selected)
        if not 0 <= at < self._array.size:
            raise RuntimeError("the sampler chain chose no token")
        return int(self._data["id"][at])


def _grammar(grammar: str, handle: LlamaHandle) -> llama_cpp.llama_sampler_p:
    """A grammar sampler of its own, outside the chain (see TokenSampler.sample)."""
    stage: llama_cpp.llama_sampler_p | None = llama_cpp.llama_sampler_init_grammar(
        handle.vocab, grammar.encode("utf-8"), b"root"
    )
    if not stage:
        raise BadInputError("llama.cpp could not parse the grammar the reply must follow")
    return stage


def _dry(s: SamplingSettings, handle: LlamaHandle, n_ctx: int) -> llama_cpp.llama_sampler_p:
    """DRY's stage; llama.cpp tokenizes the breakers now, so the array need not outlive it."""
    breakers = (ctypes.c_char_p * len(DRY_SEQUENCE_BREAKERS))(
        *(b.encode("utf-8") for b in DRY_SEQUENCE_BREAKERS)
    )
    stage: llama_cpp.llama_sampler_p = llama_cpp.llama_sampler_init_dry(
        handle.vocab,
        s.dry_multiplier,
        s.dry_base,
        s.dry_allowed_length,
        _window(s.dry_last_n, n_ctx),
        breakers,
        len(DRY_SEQUENCE_BREAKERS),
    )
    return stage


def _window(last_n: int, n_ctx: int) -> int:
    return n_ctx if last_n == WHOLE_CONTEXT else last_n
