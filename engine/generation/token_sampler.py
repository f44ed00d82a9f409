"""Choosing each sequence's next token: llama.cpp's sampler chain, one per sequence.

Every stream the scheduler runs (a chat turn, a vision turn, a document of a
batch job) draws its tokens through one of these, built from its
`SamplingSettings` in llama.cpp's own order (common/sampling.cpp): the
penalties (repeat, frequency, presence) over the reply's last tokens, DRY,
then greedy at temperature 0, else top-k, typical (off), top-p, min-p,
temperature and a seeded draw. The same settings therefore sample alike
whether or not an image joined the conversation or a document is summarised.

A chain keeps state (the penalties' recent tokens, DRY's history, the random
stream), so each sequence gets its own and frees it when it ends.
"""

from __future__ import annotations

import ctypes

import llama_cpp

from engine.errors import BadInputError
from engine.generation.sampling import WHOLE_CONTEXT, SamplingSettings
from engine.llama.handle import LlamaHandle

DRY_SEQUENCE_BREAKERS = ("\n", ":", '"', "*")  # llama.cpp's defaults: DRY restarts at these
_MIN_KEEP = 1


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
        constraint = [_grammar(grammar, handle)] if grammar is not None else []  # may refuse
        chosen_seed = seed if settings.seed is None else settings.seed
        stages = constraint + _stages(settings, handle, chosen_seed, n_ctx)
        params = llama_cpp.llama_sampler_chain_default_params()
        self._chain: llama_cpp.llama_sampler_p | None = llama_cpp.llama_sampler_chain_init(params)
        for stage in stages:
            llama_cpp.llama_sampler_chain_add(self._chain, stage)  # the chain owns the stage

    def sample(self, ctx: ctypes.c_void_p, index: int) -> int:
        """The next token from the logits of batch `index` (-1: the last) of `ctx`'s last
        decode; the chain takes it into its history (the penalties' window)."""
        if self._chain is None:
            raise RuntimeError("the sampler is closed")
        return int(llama_cpp.llama_sampler_sample(self._chain, ctx, index))

    def close(self) -> None:
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None

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


def _grammar(grammar: str, handle: LlamaHandle) -> llama_cpp.llama_sampler_p:
    """The grammar stage, first in the chain: every later stage then chooses among the
    tokens the grammar allows (llama.cpp's full constraint, not its resample-on-reject
    shortcut, which costs the same when the grammar allows few tokens)."""
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
