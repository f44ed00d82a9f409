"""A long string array of a GGUF header, decoded when first read (engine.model.gguf_header).

A tokenizer's tokens and merges are some 100,000 strings that planning never reads: it
needs their count, and the API server the longest token's bytes. Decoding them was half
of the built-in model's header parse, 28 of 56 ms. The parser walks them, checking every
length as for any string, and keeps where they start, how many there are and the longest;
the strings are decoded on first use, undecodable bytes replaced as in any header string.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import overload

_U64 = struct.Struct("<Q")


class StringArray(Sequence[str]):
    """`count` length-prefixed strings from `start` in `buf`, every length checked already."""

    def __init__(self, buf: bytes, start: int, count: int, longest_bytes: int) -> None:
        self._buf, self._start, self._count = buf, start, count
        self.longest_bytes = longest_bytes  # the longest string's UTF-8 bytes

    @cached_property
    def _strings(self) -> list[str]:
        buf, pos, unpack = self._buf, self._start, _U64.unpack_from
        strings: list[str] = []
        for _ in range(self._count):
            end = pos + 8 + unpack(buf, pos)[0]  # every length was checked by the parse
            strings.append(buf[pos + 8 : end].decode("utf-8", "replace"))
            pos = end
        return strings

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        return self._strings[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._strings)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (StringArray, list, tuple)):
            return len(self) == len(other) and self._strings == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compared by value, like the list it stands for

    def __repr__(self) -> str:
        return f"StringArray({self._count} strings, longest {self.longest_bytes} bytes)"
