"""A GGUF header read from bytes alone, so a model can be planned before it is downloaded.

gguf's GGUFReader needs the whole file memory-mapped. To plan a model that
lives on Hugging Face we fetch only the start of its file with HTTP Range
requests, and the header's length is not known in advance: `parse_header`
takes any prefix and either returns the header or raises `NeedMoreBytes` with
an estimate of the prefix length that will hold it. Local files go through
the same parser (`read_local_header`), so remote and local inventories agree
by construction.

Only little-endian GGUF (versions 2 and 3) is read; big-endian files are
refused. Counts and lengths are checked before anything is allocated from
them, and every item consumes bytes, so a malicious header cannot make the
parser loop or allocate beyond the bytes it was given. No string may be longer
than its place in the header can hold (a key, a tensor name, a text value such
as a chat template, an item of a token list), and where the file's size is
known, no count or length may imply more bytes than the file holds, and a local
header is read in growing steps (at most 8x a round) rather than at the size its
counts claim: one corrupt tensor count made the reader ask for gigabytes of weights.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, NoReturn

import gguf
import numpy as np

from engine.errors import ModelFileError
from engine.model.gguf_strings import StringArray

VT = gguf.GGUFValueType
SUPPORTED_VERSIONS = (2, gguf.GGUF_VERSION)  # as gguf's own reader: v1 had 32-bit counts
DEFAULT_ALIGNMENT = gguf.GGUF_DEFAULT_ALIGNMENT
MAX_HEADER_BYTES = 2**40  # no count may imply more than this
# Each string is bounded by what its place in the header can hold, before a byte of it is
# read: a file's size alone let a 6 GiB file's chat template claim 1 GiB, and reading the
# header peaked at 7.6 GiB of memory (the reads, the parser's copies, the decoded text).
MAX_KEY_BYTES = 2**16 - 1  # the GGUF spec's limit for a metadata key
MAX_TENSOR_NAME_BYTES = 63  # ggml's GGML_MAX_NAME (64) with its NUL; gguf.cpp refuses longer
# a text value: a chat template is kilobytes (the longest we know, tool-calling templates,
# tens of KB), a license or a description as long; llama.cpp's own limit is 1 GiB
MAX_TEXT_BYTES = 16 << 20
# an item of a string array: a token or merge is a few bytes (the longest token of a
# vocabulary is a few hundred), a tag or a language a word
MAX_ITEM_BYTES = 64 << 10
MAX_TENSOR_DIMS = 4  # ggml's GGML_MAX_DIMS
MAX_ARRAY_NESTING = 8
# a vocabulary's header is 1-10 MiB (SmolLM2's 1.2, Llama 3's about 8): one read of 8 MiB
# parses most in one pass, where 1 MiB parsed the built-in model's twice (23 ms more)
FIRST_READ_BYTES = 8 << 20
LAZY_STRINGS_FROM = 1024  # a string array this long (a tokenizer's) is decoded when read

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_MAGIC_BYTES = _U32.pack(gguf.GGUF_MAGIC)
_DIMS = [struct.Struct(f"<{n}Q") for n in range(MAX_TENSOR_DIMS + 1)]
_TYPE_AND_OFFSET = struct.Struct("<IQ")
_FIXED_HEADER = struct.Struct("<IIQQ")  # magic, version, n_tensors, n_kv
_TOKENS_KEY = gguf.Keys.Tokenizer.LIST
_TOKEN_TYPE_KEY = gguf.Keys.Tokenizer.TOKEN_TYPE
_MERGES_KEY = gguf.Keys.Tokenizer.MERGES
_KV_GUESS_BYTES = 64  # a typical scalar key/value pair, for estimating what is still to come
_TENSOR_GUESS_BYTES = 80  # a typical tensor-info entry before any has been read
_MIN_KV_BYTES = 8 + 4 + 1  # empty key, value type, the smallest value
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # empty name, n_dims = 0, type, offset
_NUMBER_DTYPES: dict[VT, np.dtype[Any]] = {
    vtype: np.dtype(scalar).newbyteorder("<")
    for vtype, scalar in gguf.GGUFReader.gguf_scalar_to_np.items()
}


class NeedMoreBytes(Exception):
    """The bytes end before the header does; `needed` is the prefix length to fetch next.

    `needed` is always more than the bytes given, and estimates the whole
    header's length: what is still to come is extrapolated from what was read
    (the average size of the strings or tensor entries so far), so a caller
    that fetches `needed` bytes usually finishes in the next round.
    """

    def __init__(self, needed: int, have: int) -> None:
        super().__init__(f"the GGUF header needs about {needed} bytes, only {have} given")
        self.needed = needed


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table: where a tensor's data lies and how big it is."""

    name: str
    shape: tuple[int, ...]  # as ggml stores it: ne0 (the row length) first
    ggml_type: gguf.GGMLQuantizationType
    offset: int  # relative to the data section's start
    n_elements: int
    n_bytes: int


@dataclass(frozen=True)
class GGUFHeader:
    """Metadata and tensor table of a GGUF file; `fields` holds decoded values (read-only)."""

    version: int
    fields: Mapping[str, object]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_offset: int

    @property
    def header_bytes(self) -> int:
        return self.data_offset

    @property
    def data_end(self) -> int:
        """The least file size that holds every tensor's data."""
        return self.data_offset + max((t.offset + t.n_bytes for t in self.tensors), default=0)

    def field(self, key: str, default: object = None) -> object:
        return self.fields.get(key, default)


class _Short(Exception):
    """Internal: the bytes ran out; `end` estimates where the item being read ends."""

    def __init__(self, end: int) -> None:
        super().__init__(end)
        self.end = end


def parse_header(data: bytes | bytearray | memoryview, file_bytes: int | None = None) -> GGUFHeader:
    """Parse a GGUF header from a prefix of the file (or the whole file).

    Raises NeedMoreBytes when the prefix ends before the tensor table does, and
    ModelFileError when the bytes are not a GGUF header this engine can read.
    `file_bytes`, the whole file's size where known, bounds every count and length.
    """
    return _Parser(bytes(data), file_bytes).header()


def read_local_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Read a local file's header with plain reads of a growing prefix (no memory map).

    A header that ends at the end of the file is refused as a truncated GGUF;
    errors name the path.
    """
    try:
        with open(path, "rb") as handle:
            return _header_of_stream(handle)
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except ModelFileError as exc:
        raise ModelFileError(f"{path}: {exc}") from None


def _header_of_stream(handle: BinaryIO) -> GGUFHeader:
    """Read on until the header parses, at least doubling the prefix each round.

    Reads never ask for more than the file holds: a wild estimate from a
    malformed header must not become a huge read buffer.
    """
    file_bytes = os.fstat(handle.fileno()).st_size
    buffer = bytearray()
    want = FIRST_READ_BYTES
    while True:
        ask = max(0, min(want, file_bytes) - len(buffer))
        chunk = handle.read(ask)
        buffer += chunk
        try:
            return parse_header(buffer, file_bytes)
        except NeedMoreBytes as short:
            if len(chunk) < ask or len(buffer) >= file_bytes:  # the file ended first
                raise ModelFileError(
                    f"truncated GGUF (the header needs more than the file's {len(buffer)} bytes)"
                ) from None
            # at most 8x a round: a corrupt count's estimate is the whole file
            want = max(2 * want, min(short.needed, 8 * want))


class _Parser:
    """One pass over the bytes; its position and counts also feed the NeedMoreBytes estimate."""

    def __init__(self, buf: bytes, file_bytes: int | None = None) -> None:
        self.buf = buf
        self.limit = MAX_HEADER_BYTES if file_bytes is None else min(file_bytes, MAX_HEADER_BYTES)
        self.pos = 0
        self.fields: dict[str, object] = {}
        self.key = ""  # the key whose value is being read
        self.value_start = 0
        self.array_count = 0  # items of the (outermost) array being read
        self.tokens_bytes = 0  # bytes of the tokenizer's token list, once read
        self.kv_left = 0  # key/value pairs after the one being read
        self.tensors_left = 0  # tensor entries after the one being read
        self.table_start = 0
        self.tensors_done = 0
        self.alignment = DEFAULT_ALIGNMENT

    def header(self) -> GGUFHeader:
        try:
            return self._header()
        except _Short as short:
            estimate = min(short.end + self._rest_estimate(short.end), self.limit)
            needed = max(len(self.buf) + 1, estimate)
            raise NeedMoreBytes(needed, len(self.buf)) from None

    def _rest_estimate(self, item_end: int) -> int:
        """Bytes expected after the item that ran short: later pairs, tensor entries, padding."""
        per_tensor = _TENSOR_GUESS_BYTES
        if self.tensors_done:
            per_tensor = -(-(self.pos - self.table_start) // self.tensors_done)
        rest = self.kv_left * _KV_GUESS_BYTES + self.tensors_left * per_tensor
        rest += self._vocabulary_arrays_to_come(item_end)
        return rest + rest // 8 + self.alignment  # a little slack saves a round trip

    def _vocabulary_arrays_to_come(self, item_end: int) -> int:
        """Token types and merges usually follow the token list: 4 bytes a token, and as big."""
        if self.kv_left == 0:
            return 0
        if self.key == _TOKENS_KEY:
            n_tokens, tokens_bytes = self.array_count, item_end - self.value_start
        elif isinstance(tokens := self.fields.get(_TOKENS_KEY), (list, StringArray)):
            n_tokens, tokens_bytes = len(tokens), self.tokens_bytes
        else:
            return 0
        expected = {_TOKEN_TYPE_KEY: 12 + 4 * n_tokens, _MERGES_KEY: tokens_bytes}
        return sum(n for key, n in expected.items() if key != self.key and key not in self.fields)

    def _header(self) -> GGUFHeader:
        _, version, n_tensors, n_kv = self._fixed_header()
        self.tensors_left = n_tensors
        for left in range(n_kv - 1, -1, -1):
            self.kv_left = left
            self._key_value()
        self.alignment = _alignment(self.fields)
        tensors = self._tensor_table(n_tensors)
        data_offset = _padded(self.pos, self.alignment)
        return GGUFHeader(version, self.fields, tensors, self.alignment, data_offset)

    def _fixed_header(self) -> tuple[int, int, int, int]:
        if not _MAGIC_BYTES.startswith(self.buf[: len(_MAGIC_BYTES)]):
            raise ModelFileError("not a GGUF file (wrong magic bytes)")
        magic, version, n_tensors, n_kv = self._unpack(_FIXED_HEADER)
        if version & 0xFFFF == 0 and version:
            raise ModelFileError("big-endian GGUF files are not supported")
        if version not in SUPPORTED_VERSIONS:
            raise ModelFileError(f"unsupported GGUF version {version}")
        self._within_file(f"tensor count {n_tensors}", n_tensors * _MIN_TENSOR_INFO_BYTES)
        self._within_file(f"metadata count {n_kv}", n_kv * _MIN_KV_BYTES)
        return magic, version, n_tensors, n_kv

    def _within_file(self, what: str, n_bytes: int) -> None:
        """Refuse a count or length that needs more bytes than the file (or any header) has."""
        if self.pos + n_bytes <= self.limit:
            return
        if self.limit < MAX_HEADER_BYTES:
            raise ModelFileError(
                f"truncated GGUF (its {what} needs more than the file's {self.limit} bytes)"
            )
        raise ModelFileError(f"malformed GGUF: absurd {what}")

    def _unpack(self, layout: struct.Struct) -> tuple[Any, ...]:
        end = self.pos + layout.size
        if end > len(self.buf):
            raise _Short(end)
        values = layout.unpack_from(self.buf, self.pos)
        self.pos = end
        return values

    def _string(self, most: int, what: str) -> str:
        """A string of at most `most` bytes (`what` it is names it in the refusal)."""
        (length,) = self._unpack(_U64)
        if length > most:
            raise ModelFileError(_too_long(length, what, most))
        self._within_file(f"string length {length}", length)
        end = self.pos + length
        if end > len(self.buf):
            raise _Short(end)
        text = self.buf[self.pos : end].decode("utf-8", "replace")
        self.pos = end
        return text

    def _key_value(self) -> None:
        self.key, self.array_count = self._string(MAX_KEY_BYTES, "a metadata key"), 0
        if self.key in self.fields:
            raise ModelFileError(f"malformed GGUF: metadata key {self.key!r} appears twice")
        self.value_start = self.pos
        self.fields[self.key] = self._value(self._value_type())
        if self.key == _TOKENS_KEY:
            self.tokens_bytes = self.pos - self.value_start

    def _value_type(self) -> VT:
        (raw,) = self._unpack(_U32)
        try:
            return VT(raw)
        except ValueError:
            raise ModelFileError(f"malformed GGUF: unknown value type {raw}") from None

    def _value(self, vtype: VT, depth: int = 0) -> object:
        if vtype is VT.STRING:
            return self._string(MAX_TEXT_BYTES, self.key)
        if vtype is VT.ARRAY:
            return self._array(depth + 1)
        values: list[object] = self._numbers(vtype, 1)
        return values[0]

    def _numbers(self, vtype: VT, count: int) -> list[Any]:
        dtype = _NUMBER_DTYPES[vtype]
        end = self.pos + count * dtype.itemsize
        if end > len(self.buf):
            raise _Short(end)
        values: list[Any] = np.frombuffer(self.buf, dtype, count, self.pos).tolist()
        self.pos = end
        return values

    def _array(self, depth: int) -> list[Any] | StringArray:
        if depth > MAX_ARRAY_NESTING:
            raise ModelFileError("malformed GGUF: arrays nested too deeply")
        item_type = self._value_type()
        (count,) = self._unpack(_U64)
        item_bytes = _NUMBER_DTYPES[item_type].itemsize if item_type in _NUMBER_DTYPES else 8
        self._within_file(f"array length {count}", count * item_bytes)
        if depth == 1:
            self.array_count = count
        if item_type in _NUMBER_DTYPES:
            return self._numbers(item_type, count)
        if item_type is VT.STRING:
            return self._strings(count)
        return self._items(count, lambda: self._array(depth + 1))

    def _strings(self, count: int) -> list[str] | StringArray:
        """A string array, walked in one tight loop (tokenizers hold hundreds of thousands)
        and decoded now if short, else when first read (engine.model.gguf_strings)."""
        walked = self._walked_strings(count)
        return walked if count >= LAZY_STRINGS_FROM else list(walked)

    def _walked_strings(self, count: int) -> StringArray:
        """Every string's length checked against the bytes and the file; none decoded."""
        buf, pos, start, limit = self.buf, self.pos, self.pos, self.limit
        unpack, longest, done = _U64.unpack_from, 0, 0
        end = pos + 8  # where the string being read ends, once its length is known
        try:
            for done in range(count):  # noqa: B007  # after it: how many were read
                (length,) = unpack(buf, pos)
                if length > MAX_ITEM_BYTES or pos + 8 + length > limit:
                    self.pos = pos + 8
                    self._refuse_item(length)
                end = pos + 8 + length
                if end > len(buf):
                    break
                if length > longest:
                    longest = length
                pos = end
                end = pos + 8
            else:
                done = count
        except struct.error:
            pass
        self.pos = pos
        if done < count:
            raise _Short(max(end, _extrapolated(start, pos, done, count, 8)))
        return StringArray(buf, start, count, longest)

    def _refuse_item(self, length: int) -> NoReturn:
        """An array's string too long for any item, or for the file that holds it."""
        if length <= MAX_ITEM_BYTES:
            self._within_file(f"string length {length}", length)
        raise ModelFileError(_too_long(length, f"an item of {self.key}", MAX_ITEM_BYTES))

    def _items(self, count: int, read_item: Callable[[], object]) -> list[object]:
        start, items = self.pos, []
        for _ in range(count):
            try:
                items.append(read_item())
            except _Short as short:
                done_end = max(_extrapolated(start, self.pos, len(items), count, 12), short.end)
                raise _Short(done_end) from None
        return items

    def _tensor_table(self, count: int) -> tuple[TensorInfo, ...]:
        self.table_start = self.pos
        tensors: list[TensorInfo] = []
        names: set[str] = set()
        for left in range(count - 1, -1, -1):
            self.tensors_left = left
            tensor = self._tensor_info()
            if tensor.name in names:
                raise ModelFileError(f"malformed GGUF: tensor {tensor.name!r} appears twice")
            names.add(tensor.name)
            tensors.append(tensor)
            self.tensors_done += 1
        return tuple(tensors)

    def _tensor_info(self) -> TensorInfo:
        name = self._string(MAX_TENSOR_NAME_BYTES, f"the name of tensor {self.tensors_done}")
        (n_dims,) = self._unpack(_U32)
        if n_dims > MAX_TENSOR_DIMS:
            raise ModelFileError(f"malformed GGUF: tensor {name!r} has {n_dims} dimensions")
        shape = self._unpack(_DIMS[n_dims])
        raw_type, offset = self._unpack(_TYPE_AND_OFFSET)
        ggml_type = _ggml_type(raw_type, name)
        block_size, type_size = gguf.GGML_QUANT_SIZES[ggml_type]
        n_elements = math.prod(shape)
        n_bytes = n_elements * type_size // block_size
        return TensorInfo(name, tuple(shape), ggml_type, offset, n_elements, n_bytes)


def _too_long(length: int, what: str, most: int) -> str:
    return f"malformed GGUF: absurd string length {length} for {what} (at most {most} bytes)"


def _extrapolated(start: int, pos: int, done: int, count: int, least_item: int) -> int:
    """Where an array of `count` items ends, judged from the `done` items between start and pos."""
    per_item = (pos - start) / done if done else least_item
    later_items_slack = (count - done) * per_item / 8  # later items tend to be longer (BPE tokens)
    return max(pos + least_item, start + int(per_item * count + later_items_slack))


def _ggml_type(raw: int, tensor_name: str) -> gguf.GGMLQuantizationType:
    try:
        ggml_type = gguf.GGMLQuantizationType(raw)
    except ValueError:
        ggml_type = None
    if ggml_type is None or ggml_type not in gguf.GGML_QUANT_SIZES:
        raise ModelFileError(f"malformed GGUF: tensor {tensor_name!r} has unknown type {raw}")
    return ggml_type


def _alignment(fields: Mapping[str, object]) -> int:
    value = fields.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ModelFileError(f"malformed GGUF: bad general.alignment {value!r}")
    if value & (value - 1):
        raise ModelFileError(f"malformed GGUF: general.alignment {value} is not a power of two")
    return value


def _padded(offset: int, alignment: int) -> int:
    return offset + (-offset % alignment)
