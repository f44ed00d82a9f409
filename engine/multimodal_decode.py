"""Evaluating a prompt of text runs and image embeddings in the language model's context.

Needs no vision encoder: images arrive as embeddings in host memory, so the
encoder may already be freed. What the KV cache holds is remembered token by
token (a text token by its id, an image token by its image's digest), so the
next turn of the conversation evaluates only what changed; a change inside an
image re-evaluates the whole image, whose tokens attend to each other.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp
import numpy as np

from engine.mtmd_context import EncodedImage, Piece, TextRun

Identity = int | tuple[str, int]  # a text token's id, or (image digest, index in the image)
_MAX_POSITIONS = 4  # llama.cpp's M-RoPE sections


def _inside_image(identity: Identity) -> bool:
    """An image token after the image's first one."""
    return isinstance(identity, tuple) and identity[1] > 0


class DecodeError(RuntimeError):
    """llama_decode failed (or was aborted) on the prompt."""

    def __init__(self, code: int) -> None:
        super().__init__(f"llama_decode returned {code} on the prompt")
        self.code = code


@dataclass
class _Held:
    identity: Identity
    position: int  # where to cut the KV cache to drop this token and all after it


class PromptDecoder:
    """Feeds prompts into one llama context's sequence 0 and tracks what it holds."""

    def __init__(self, ctx: ctypes.c_void_p, n_batch: int) -> None:
        self._ctx = ctx
        self._memory = llama_cpp.llama_get_memory(ctx)
        self._n_batch = n_batch
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)  # reused for every text step
        self._held: list[_Held] = []
        self.n_past = 0

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None

    def forget(self) -> None:
        """Someone else used the context: assume nothing about what it holds (the next
        prompt then starts by dropping every cell of sequence 0)."""
        self._held, self.n_past = [], 0

    def decode(self, pieces: Sequence[Piece]) -> tuple[int, int]:
        """Evaluate the prompt; returns (prompt tokens, tokens reused from the cache).

        Callers install llama.cpp's abort callback to make it cancellable. Afterwards
        the logits of the prompt's last token are ready for sampling.
        """
        wanted = _identities(pieces)
        keep = self._reusable(wanted)
        cut = self._held[keep].position if keep < len(self._held) else self.n_past
        llama_cpp.llama_memory_seq_rm(self._memory, 0, cut, -1)
        self._held, self.n_past = self._held[:keep], cut
        done = 0
        for piece in pieces:
            size = _size(piece)
            if done + size <= keep:
                done += size
                continue
            if isinstance(piece, TextRun):
                self._text(piece.tokens[keep - done if keep > done else 0 :])
            else:
                self._image(piece)
            done += size
        return len(wanted), keep

    def add_token(self, token: int) -> None:
        """A sampled token, evaluated so its logits are ready; it joins what the cache holds."""
        self._text((token,))

    def _reusable(self, wanted: list[Identity]) -> int:
        """Leading tokens already in the cache; never all (the last one must give logits),
        never half an image."""
        keep = 0
        for held, want in zip(self._held, wanted, strict=False):
            if held.identity != want:
                break
            keep += 1
        keep = min(keep, len(wanted) - 1)
        while keep > 0 and _inside_image(wanted[keep]):
            keep -= 1  # inside an image: back to its first token
        return max(keep, 0)

    def _text(self, tokens: Sequence[int]) -> None:
        batch = self._batch
        if batch is None:
            raise RuntimeError("the prompt decoder is closed")
        for start in range(0, len(tokens), self._n_batch):
            part = tokens[start : start + self._n_batch]
            for i, token in enumerate(part):
                batch.token[i] = token
                batch.pos[i] = self.n_past + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = start + i == len(tokens) - 1
            batch.n_tokens = len(part)
            self._check(llama_cpp.llama_decode(self._ctx, batch))
            self._held += [_Held(t, self.n_past + i) for i, t in enumerate(part)]
            self.n_past += len(part)

    def _image(self, image: EncodedImage) -> None:
        """The image's embeddings in n_batch slices, at its positions, attending both ways
        when the model wants that (set for the image only)."""
        positions = image.positions_at(self.n_past)
        data = np.ascontiguousarray(image.embeddings, dtype=np.float32)
        batch = llama_cpp.llama_batch_ext_init(self._ctx)
        if image.non_causal:
            llama_cpp.llama_set_causal_attn(self._ctx, False)
        try:
            for start in range(0, image.n_tokens, self._n_batch):
                llama_cpp.llama_batch_ext_clear(batch)
                for i in range(start, min(start + self._n_batch, image.n_tokens)):
                    row = data[i]
                    embd = llama_cpp.llama_embd(
                        row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, row.size
                    )
                    index = llama_cpp.llama_batch_ext_add_embd(batch, 0, embd)
                    if index < 0:
                        raise DecodeError(index)
                    pos = (llama_cpp.llama_pos * _MAX_POSITIONS)(*positions[:, i].tolist())
                    llama_cpp.llama_batch_ext_set_pos(batch, index, pos)
                code = llama_cpp.llama_process(
                    self._ctx, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, batch
                )
                self._check(code)
        finally:
            if image.non_causal:
                llama_cpp.llama_set_causal_attn(self._ctx, True)
            llama_cpp.llama_batch_ext_free(batch)
        start_pos = self.n_past
        self._held += [_Held((image.digest, i), start_pos) for i in range(image.n_tokens)]
        self.n_past += image.n_pos

    def _check(self, code: int) -> None:
        """A failed or aborted (code 2) step leaves the cache in doubt: start the next clean."""
        if code != 0:
            self.forget()
            raise DecodeError(code)


def _identities(pieces: Sequence[Piece]) -> list[Identity]:
    out: list[Identity] = []
    for piece in pieces:
        if isinstance(piece, TextRun):
            out.extend(piece.tokens)
        else:
            out.extend((piece.digest, i) for i in range(piece.n_tokens))
    return out


def _size(piece: Piece) -> int:
    return len(piece.tokens) if isinstance(piece, TextRun) else piece.n_tokens
