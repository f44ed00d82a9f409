"""What a prompt is made of: runs of text tokens and images already encoded to embeddings.

Plain values: the scheduler feeds them without knowing how an image was
encoded (engine.vision.mtmd_context makes them), and the embeddings live in host
memory, so the encoder may be freed before the language model decodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from engine.errors import PromptTooLong

TILE_MARK = "#"  # an EncodedImage's digest#k: the k-th tile of a sliced image


@dataclass(frozen=True)
class EncodedImage:
    """An image's embeddings in host memory and how they take their places in the sequence.

    `positions_at(n_past)` gives each embedding's position(s): one per token, or
    four (M-RoPE, Qwen2.5-VL) laid out section-major, as llama.cpp expects.
    """

    digest: str
    embeddings: np.ndarray = field(repr=False)  # (n_tokens, n_embd) float32
    n_pos: int  # positions the image advances the sequence by
    non_causal: bool  # its tokens attend to each other both ways (Gemma 3)
    pos_base: np.ndarray = field(repr=False)  # (n_pos_per_embd, n_tokens) at n_past = 0
    pos_step: np.ndarray = field(repr=False)  # how positions move per unit of n_past

    @property
    def n_tokens(self) -> int:
        return int(self.embeddings.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.embeddings.nbytes)

    def positions_at(self, n_past: int) -> np.ndarray:
        positions: np.ndarray = (self.pos_base + self.pos_step * n_past).astype(np.int32)
        return positions


@dataclass(frozen=True)
class TextRun:
    tokens: tuple[int, ...]


Piece = TextRun | EncodedImage


def prompt_size(pieces: Iterable[TextRun | EncodedImage]) -> int:
    """The tokens a prompt takes in the KV cache: its text tokens and its images' tokens."""
    return sum(len(p.tokens) if isinstance(p, TextRun) else p.n_tokens for p in pieces)


def prompt_fits(size: int, room: int) -> bool:
    """A prompt of `size` tokens runs in a window of `room` only with room for one reply
    token after it."""
    return size + 1 < room


def check_prompt_fits(size: int, room: int) -> None:
    """`prompt_fits`, or PromptTooLong saying both sizes."""
    if not prompt_fits(size, room):
        raise PromptTooLong(size, room)
