"""What the model thought of each token it said: the chosen token's log-probability and the
most likely alternatives, as OpenAI's `logprobs` reports them.

Read from the raw logits of the step (log-softmax over the whole vocabulary), before any
sampler stage reshapes them, so the figures say what the model predicted, not what the
penalties or the grammar allowed. Only streams that ask pay for it: one pass over the
vocabulary per token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MAX_TOP_LOGPROBS = 20  # OpenAI's limit


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its id and bytes, its log-probability, the top alternatives
    (id, bytes, log-probability), most likely first."""

    token: int
    text: bytes
    logprob: float
    top: tuple[tuple[int, bytes, float], ...] = ()


def log_softmax(logits: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    shifted = logits.astype(np.float64) - float(np.max(logits))
    return shifted - float(np.log(np.sum(np.exp(shifted))))


def top_tokens(logprobs: npt.NDArray[np.float64], n: int) -> list[int]:
    """The `n` most likely token ids, most likely first."""
    if n <= 0:
        return []
    n = min(n, logprobs.size)
    best = np.argpartition(-logprobs, n - 1)[:n]
    return [int(t) for t in best[np.argsort(-logprobs[best], kind="stable")]]
