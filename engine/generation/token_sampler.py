"""Choosing each sequence's next token: llama.cpp's sampler chain, one per sequence.

Every stream the scheduler runs (a chat turn, a vision turn, a document of a
batch job) draws its tokens through one of these, built from its
`SamplingSettings` in llama-cpp-python's order (so a user of plain
llama-cpp-python gets the same draws) - repeat penalty (over the last 64
sampled tokens), then greedy at temperature 0, else top-k, typical (off),
top-p, min-p, temperature and a draw seeded like the model's context. The
same settings therefore sample alike whether or not an image joined the
conversation or a document is summarised.

A chain keeps state (the penalty's recent tokens, the random stream), so each
sequence gets its own and frees it when it ends.
"""

from __future__ import annotations

import ctypes

import llama_cpp

from engine.generation.sampling import SamplingSettings

PENALTY_WINDOW = 64  # llama-cpp-python's last_n_tokens_size, llama.cpp's penalty_last_n
_MIN_KEEP = 1


class TokenSampler:
    """llama.cpp's sampler chain for one sequence; close() frees it."""

    def __init__(self, settings: SamplingSettings, n_vocab: int, seed: int) -> None:
        params = llama_cpp.llama_sampler_chain_default_params()
        self._chain: llama_cpp.llama_sampler_p | None = llama_cpp.llama_sampler_chain_init(params)
        for stage in _stages(settings, n_vocab, seed):
            llama_cpp.llama_sampler_chain_add(self._chain, stage)  # the chain owns the stage

    def sample(self, ctx: ctypes.c_void_p, index: int) -> int:
        """The next token from the logits of batch `index` (-1: the last) of `ctx`'s last
        decode; the chain takes it into its history (the penalty's window)."""
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


def _stages(settings: SamplingSettings, n_vocab: int, seed: int) -> list[llama_cpp.llama_sampler_p]:
    """The chain's samplers in llama-cpp-python's order (Llama._init_sampler)."""
    stages = [
        llama_cpp.llama_sampler_init_penalties(
            n_vocab, PENALTY_WINDOW, settings.repeat_penalty, 0.0, 0.0
        )
    ]
    if settings.is_greedy:
        return [*stages, llama_cpp.llama_sampler_init_greedy()]
    return [
        *stages,
        llama_cpp.llama_sampler_init_top_k(settings.top_k),
        llama_cpp.llama_sampler_init_typical(1.0, _MIN_KEEP),
        llama_cpp.llama_sampler_init_top_p(settings.top_p, _MIN_KEEP),
        llama_cpp.llama_sampler_init_min_p(settings.min_p, _MIN_KEEP),
        llama_cpp.llama_sampler_init_temp(settings.temperature),
        llama_cpp.llama_sampler_init_dist(seed),
    ]
