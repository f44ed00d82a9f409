"""Sampled tokens into text: their bytes, UTF-8 safe, stop strings held back."""

from __future__ import annotations

import codecs
import ctypes
from collections.abc import Sequence

import llama_cpp

_PIECE_BUFFER = 64


def token_bytes(vocab: llama_cpp.llama_vocab_p, token: int, special: bool = False) -> bytes:
    """The bytes of one token's text piece; special tokens render as nothing unless
    `special` (a tool call's [TOOL_CALLS] or <|python_tag|> is a control token)."""
    buffer = ctypes.create_string_buffer(_PIECE_BUFFER)
    size = llama_cpp.llama_token_to_piece(vocab, token, buffer, _PIECE_BUFFER, 0, special)
    if size < 0:  # the piece is longer than the buffer: llama.cpp tells us how long
        buffer = ctypes.create_string_buffer(-size)
        size = llama_cpp.llama_token_to_piece(vocab, token, buffer, -size, 0, special)
    return buffer.raw[:size]


class TextAssembler:
    """Bytes to text, never splitting a UTF-8 character or emitting part of a stop string."""

    def __init__(self, stop: Sequence[str]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(s for s in stop if s)
        self._held = ""
        self.stopped = False

    def feed(self, piece: bytes) -> str:
        if self.stopped:
            return ""
        self._held += self._decoder.decode(piece)
        for stop in self._stop:
            at = self._held.find(stop)
            if at >= 0:
                self.stopped = True
                text, self._held = self._held[:at], ""
                return text
        cut = len(self._held) - self._partial_stop_length()
        text, self._held = self._held[:cut], self._held[cut:]
        return text

    def flush(self) -> str:
        """The held text; a character cut short (max_tokens ended inside it) is dropped, not
        said as U+FFFD."""
        tail = "" if self.stopped else self._held
        self._decoder.reset()
        self._held = ""
        return tail

    def _partial_stop_length(self) -> int:
        """Length of the longest tail of the held text that could begin a stop string."""
        return max((partial_at_end(self._held, stop) for stop in self._stop), default=0)


def partial_at_end(text: str, marker: str) -> int:
    """Length of the longest tail of `text` that is a proper beginning of `marker`: what
    must be held back while the next piece may complete the marker."""
    for length in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-length:]):
            return length
    return 0
