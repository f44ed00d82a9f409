"""Choosing the next token from one sequence's logits, for the batched engine.

The batched engine reads each sequence's logits row itself, so it samples in
numpy instead of through llama-cpp-python's single-sequence `Llama.generate`.
Greedy (temperature 0) is an argmax, and reproducible; otherwise the steps
follow llama-cpp-python's order: repeat penalty, top-k, top-p, min-p,
temperature, then a draw from the per-generator random stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from engine.sampling import SamplingSettings

PENALTY_WINDOW = 64  # llama.cpp's default penalty_last_n

TokenSampler = Callable[[np.ndarray, Sequence[int]], int]


def make_token_sampler(settings: SamplingSettings, rng: np.random.Generator) -> TokenSampler:
    """A function (logits, tokens so far) -> next token for these settings."""
    if settings.is_greedy and settings.repeat_penalty == 1.0:
        return lambda logits, _history: int(np.argmax(logits))

    def sample(logits: np.ndarray, history: Sequence[int]) -> int:
        scores = _penalised(logits, history, settings.repeat_penalty)
        if settings.is_greedy:
            return int(np.argmax(scores))
        candidates = _top_k(scores, settings.top_k)
        probs = _softmax(scores[candidates])
        keep = _top_p(probs, settings.top_p) & (probs >= settings.min_p * probs.max())
        candidates = candidates[keep]
        probs = _softmax(scores[candidates] / settings.temperature)
        return int(rng.choice(candidates, p=probs))

    return sample


def _penalised(logits: np.ndarray, history: Sequence[int], penalty: float) -> np.ndarray:
    """llama.cpp's repeat penalty: recent tokens' positive logits shrink, negative ones grow."""
    if penalty == 1.0 or not history:
        return logits
    scores = np.array(logits, dtype=np.float32)
    recent = np.unique(np.asarray(history[-PENALTY_WINDOW:], dtype=np.int64))
    values = scores[recent]
    scores[recent] = np.where(values > 0, values / penalty, values * penalty)
    return scores


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best scores, best first (all of them when k <= 0)."""
    if 0 < k < scores.size:
        best = np.argpartition(scores, -k)[-k:]
        return best[np.argsort(-scores[best], kind="stable")]
    return np.argsort(-scores, kind="stable")


def _top_p(probs: np.ndarray, top_p: float) -> np.ndarray:
    """The smallest best-first prefix whose probability reaches top_p (at least one token)."""
    reached = np.cumsum(probs) >= top_p
    last = int(np.argmax(reached)) if reached.any() else probs.size - 1
    keep = np.zeros(probs.size, dtype=bool)
    keep[: last + 1] = True
    return keep


def _softmax(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max())
    probabilities: np.ndarray = shifted / shifted.sum()
    return probabilities
