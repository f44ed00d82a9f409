"""A header parsed from bytes says what gguf's reader says, from any prefix, and refuses junk."""

from __future__ import annotations

import shutil
import struct
import time
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from engine.errors import ModelFileError
from engine.model.gguf_file import without_cyclic_gc
from engine.model.gguf_header import (
    LAZY_STRINGS_FROM,
    GGUFHeader,
    NeedMoreBytes,
    parse_header,
    read_local_header,
)
from engine.model.gguf_strings import StringArray
from engine.model.inventory import inventory_from_headers, read_inventory

VT = gguf.GGUFValueType
MODELS = [("llama", "F16"), ("qwen3moe", "Q8_0"), ("gemma3", "F16"), ("default", "")]


@pytest.fixture(scope="module", params=MODELS, ids=lambda m: "-".join(filter(None, m)))
def model_file(request: pytest.FixtureRequest, make_synthetic, default_model_file: Path) -> Path:
    architecture, quant = request.param
    return default_model_file if architecture == "default" else make_synthetic(architecture, quant)


@pytest.fixture(scope="module")
def file_bytes(model_file: Path) -> bytes:
    return model_file.read_bytes()


@pytest.fixture(scope="module")
def header(file_bytes: bytes) -> GGUFHeader:
    return parse_header(file_bytes)


def reader_view(path: Path) -> dict[str, Any]:
    """What gguf's reader finds in a file, in the header's terms."""
    with without_cyclic_gc():
        reader = gguf.GGUFReader(path)
        fields = {
            name: field.contents()
            for name, field in reader.fields.items()
            if not name.startswith("GGUF.")
        }
        tensors = [
            (
                t.name,
                t.tensor_type,
                tuple(int(d) for d in t.shape),
                int(t.data_offset) - reader.data_offset,
                int(t.n_elements),
                int(t.n_bytes),
            )
            for t in reader.tensors
        ]
        return {"fields": fields, "tensors": tensors, "data_offset": reader.data_offset}


def header_view(header: GGUFHeader) -> dict[str, Any]:
    tensors = [
        (t.name, t.ggml_type, t.shape, t.offset, t.n_elements, t.n_bytes) for t in header.tensors
    ]
    return {"fields": dict(header.fields), "tensors": tensors, "data_offset": header.data_offset}


def table_end(data: bytes, header: GGUFHeader) -> int:
    """Where the tensor table ends: its first entry's start plus every entry's size."""
    first = header.tensors[0].name.encode()
    start = data.index(struct.pack("<Q", len(first)) + first)
    entry = [8 + len(t.name.encode()) + 4 + 8 * len(t.shape) + 4 + 8 for t in header.tensors]
    return start + sum(entry)


def cut_points(data: bytes, header: GGUFHeader) -> list[int]:
    tokens = data.index(b"tokenizer.ggml.tokens")
    merges = data.index(b"tokenizer.ggml.merges")
    table = table_end(data, header)
    inside = [tokens + 30, tokens + 1000, tokens + 100_000, merges + 20, merges + 50_000]
    in_table = [table - 2000, table - 100, table - 9, table - 1]
    return [0, 1, 3, 4, 7, 20, 24, 25, 60, *inside, *in_table]


def test_header_matches_gguf_reader(model_file: Path, header: GGUFHeader) -> None:
    expected = reader_view(model_file)
    got = header_view(header)
    assert got["fields"].keys() == expected["fields"].keys()
    for key, value in expected["fields"].items():
        assert got["fields"][key] == value, key
        if isinstance(got["fields"][key], StringArray):  # a tokenizer's: decoded when read
            assert isinstance(value, list) and len(value) >= LAZY_STRINGS_FROM, key
        else:
            assert type(got["fields"][key]) is type(value), key
    assert got["tensors"] == expected["tensors"]
    assert header.data_offset == header.header_bytes == expected["data_offset"]
    assert header.data_end == model_file.stat().st_size
    assert header.alignment == 32 and header.version == 3


def test_inventory_from_header_equals_read_inventory(
    model_file: Path, file_bytes: bytes, header: GGUFHeader
) -> None:
    prefix = file_bytes[: header.header_bytes]
    from_bytes = inventory_from_headers([parse_header(prefix)], str(model_file), len(file_bytes))
    from_file = read_inventory(model_file)
    assert from_bytes.to_dict() == {**from_file.to_dict(), "path": str(model_file)}
    remote = inventory_from_headers([header], "hf://someone/model.gguf", len(file_bytes))
    assert remote.path == "hf://someone/model.gguf"
    assert remote.blocks == from_file.blocks and remote.n_vocab == from_file.n_vocab


def test_every_strict_prefix_asks_for_more(file_bytes: bytes, header: GGUFHeader) -> None:
    end = table_end(file_bytes, header)
    assert end <= header.data_offset < end + header.alignment
    assert parse_header(file_bytes[:end]) == header
    for cut in cut_points(file_bytes, header):
        with pytest.raises(NeedMoreBytes) as short:
            parse_header(file_bytes[:cut])
        assert short.value.needed > cut, cut


def test_following_needed_converges_in_a_few_rounds(file_bytes: bytes, header: GGUFHeader) -> None:
    length, rounds = 0, 0
    while True:
        try:
            assert parse_header(file_bytes[:length]) == header
            break
        except NeedMoreBytes as short:
            assert short.needed > length
            length, rounds = short.needed, rounds + 1
            assert rounds <= 8
    assert length < 1.5 * header.header_bytes + 65536  # an estimate, not a leap to the file's end


def test_local_header_reads_a_growing_prefix(model_file: Path, header: GGUFHeader) -> None:
    assert read_local_header(model_file) == header


def test_a_cut_header_on_disk_is_truncated(tmp_path: Path, file_bytes: bytes) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(file_bytes[:200_000])
    with pytest.raises(ModelFileError, match="truncated") as raised:
        read_local_header(path)
    assert str(path) in str(raised.value)


# Hand-made headers for the refusals


def gguf_bytes(kv: bytes = b"", n_kv: int = 0, n_tensors: int = 0, version: int = 3) -> bytes:
    return struct.pack("<IIQQ", gguf.GGUF_MAGIC, version, n_tensors, n_kv) + kv


def gguf_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def pair(key: str, vtype: int, payload: bytes) -> bytes:
    return gguf_string(key) + struct.pack("<I", vtype) + payload


def tensor_entry(name: str, dims: tuple[int, ...], ggml_type: int, offset: int = 0) -> bytes:
    packed_dims = struct.pack(f"<I{len(dims)}Q", len(dims), *dims)
    return gguf_string(name) + packed_dims + struct.pack("<IQ", ggml_type, offset)


REFUSALS = {
    "wrong magic": (b"GGUX" + bytes(40), "not a GGUF file"),
    "wrong magic prefix": (b"GX", "not a GGUF file"),
    "version 1": (gguf_bytes(version=1), "unsupported GGUF version 1"),
    "big-endian": (struct.pack("<II", gguf.GGUF_MAGIC, 3 << 24) + bytes(16), "big-endian"),
    "unknown value type": (gguf_bytes(pair("a", 99, b""), n_kv=1), "unknown value type 99"),
    "absurd tensor count": (gguf_bytes(n_tensors=2**60), "absurd tensor count"),
    "absurd metadata count": (gguf_bytes(n_kv=2**59), "absurd metadata count"),
    "absurd array length": (
        gguf_bytes(pair("a", VT.ARRAY, struct.pack("<IQ", VT.UINT64, 2**38)), n_kv=1),
        "absurd array length",
    ),
    "absurd string length": (
        gguf_bytes(pair("a", VT.STRING, struct.pack("<Q", 2**40)), n_kv=1),
        "absurd string length",
    ),
    "absurd string in an array": (
        gguf_bytes(pair("a", VT.ARRAY, struct.pack("<IQQ", VT.STRING, 3, 2**31)), n_kv=1),
        "absurd string length",
    ),
    # each string bounded by what its place holds, whatever the bytes or the file allow
    "a key past the spec's 65,535 bytes": (
        gguf_bytes(struct.pack("<Q", 2**16), n_kv=1),
        "absurd string length 65536 for a metadata key",
    ),
    "a text value past 16 MiB": (
        gguf_bytes(
            pair("tokenizer.chat_template", VT.STRING, struct.pack("<Q", 2**30 - 1)), n_kv=1
        ),
        "absurd string length 1073741823 for tokenizer.chat_template",
    ),
    "a token past 64 KiB": (
        gguf_bytes(
            pair(
                "tokenizer.ggml.tokens",
                VT.ARRAY,
                struct.pack("<IQ", VT.STRING, 2) + gguf_string("a") + gguf_string("b" * 65537),
            ),
            n_kv=1,
        ),
        "absurd string length 65537 for an item of tokenizer.ggml.tokens",
    ),
    "a tensor name past ggml's 63 bytes": (
        gguf_bytes(tensor_entry("w" * 64, (32,), 0), n_tensors=1),
        "absurd string length 64 for the name of tensor 0",
    ),
    "nested too deeply": (
        gguf_bytes(pair("a", VT.ARRAY, struct.pack("<IQ", VT.ARRAY, 1) * 20), n_kv=1),
        "nested too deeply",
    ),
    "duplicate key": (
        gguf_bytes(pair("a", VT.UINT8, b"\1") + pair("a", VT.UINT8, b"\2"), n_kv=2),
        "appears twice",
    ),
    "bad alignment": (
        gguf_bytes(pair("general.alignment", VT.UINT32, struct.pack("<I", 0)), n_kv=1),
        "general.alignment",
    ),
    "unknown ggml type": (gguf_bytes(tensor_entry("w", (4,), 250), n_tensors=1), "unknown type"),
    "too many dims": (
        gguf_bytes(tensor_entry("w", (1, 1, 1, 1, 1), 0), n_tensors=1),
        "5 dimensions",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_junk_is_refused_with_one_sentence(case: str) -> None:
    data, expected = REFUSALS[case]
    with pytest.raises(ModelFileError, match=expected) as raised:
        parse_header(data)
    assert "\n" not in str(raised.value)


def test_a_hand_made_header_decodes_every_value_type() -> None:
    kv = b"".join(
        [
            pair("u8", VT.UINT8, b"\xff"),
            pair("i16", VT.INT16, struct.pack("<h", -2)),
            pair("f32", VT.FLOAT32, struct.pack("<f", 0.1)),
            pair("f64", VT.FLOAT64, struct.pack("<d", 0.1)),
            pair("flag", VT.BOOL, b"\1"),
            pair("i64s", VT.ARRAY, struct.pack("<IQ2q", VT.INT64, 2, -1, 2**40)),
            pair("nested", VT.ARRAY, struct.pack("<IQIQ2i", VT.ARRAY, 1, VT.INT32, 2, 5, 6)),
            pair("bad utf8", VT.STRING, struct.pack("<Q", 2) + b"\xc3\x28"),
        ]
    )
    entry = tensor_entry("w", (64, 2), gguf.GGMLQuantizationType.Q8_0, offset=0)
    header = parse_header(gguf_bytes(kv + entry, n_kv=8, n_tensors=1))
    assert header.fields == {
        "u8": 255, "i16": -2, "f32": struct.unpack("<f", struct.pack("<f", 0.1))[0],
        "f64": 0.1, "flag": True, "i64s": [-1, 2**40], "nested": [[5, 6]], "bad utf8": "\ufffd(",
    }  # fmt: skip
    (tensor,) = header.tensors
    assert (tensor.n_elements, tensor.n_bytes) == (128, 4 * 34)  # four Q8_0 blocks of 34 bytes
    assert header.data_end == header.data_offset + 136
    assert header.field("missing", 7) == 7


def test_a_large_vocabulary_parses_in_well_under_a_second() -> None:
    """151,936 tokens, their types and 151,387 merges, like Qwen's tokenizer."""
    tokens = [f"token_{i}" for i in range(151_936)]
    merges = [f"t{i} ok{i % 97}" for i in range(151_387)]
    kv = b"".join(
        [
            pair("tokenizer.ggml.tokens", VT.ARRAY, string_array(tokens)),
            pair("tokenizer.ggml.token_type", VT.ARRAY, int32_array([1] * len(tokens))),
            pair("tokenizer.ggml.merges", VT.ARRAY, string_array(merges)),
        ]
    )
    data = gguf_bytes(kv, n_kv=3)
    started = time.perf_counter()
    header = parse_header(data)
    elapsed = time.perf_counter() - started
    assert header.fields["tokenizer.ggml.tokens"] == tokens
    assert header.fields["tokenizer.ggml.merges"] == merges
    assert elapsed < 1.0


def test_a_long_string_array_is_checked_whole_and_decoded_when_read() -> None:
    """The parse walks a tokenizer's strings (every length checked) without decoding them;
    reading them decodes each as a short array's strings are, bad UTF-8 replaced."""
    items = [f"t{i}" for i in range(LAZY_STRINGS_FROM)] + ["\u00e9" * 70]
    raw = string_array(items)
    bad_at = raw.index(gguf_string("t7"))  # t7 becomes "\xff7": not UTF-8
    raw = raw[: bad_at + 8] + b"\xff" + raw[bad_at + 9 :]
    header = parse_header(gguf_bytes(pair("tokenizer.ggml.tokens", VT.ARRAY, raw), n_kv=1))
    tokens = header.fields["tokenizer.ggml.tokens"]
    assert isinstance(tokens, StringArray) and len(tokens) == len(items)
    assert tokens.longest_bytes == 140  # 70 two-byte characters, counted in bytes
    assert tokens[7] == "\ufffd7" and tokens[-1] == items[-1] and tokens[:2] == ["t0", "t1"]
    assert tokens == [*items[:7], "\ufffd7", *items[8:]] and list(tokens) == tokens[:]
    short = parse_header(gguf_bytes(pair("k", VT.ARRAY, string_array(items[:3])), n_kv=1))
    assert short.fields["k"] == ["t0", "t1", "t2"] and type(short.fields["k"]) is list
    absurd = raw[:bad_at] + struct.pack("<Q", 2**40) + raw[bad_at + 8 :]
    with pytest.raises(ModelFileError, match="string length"):
        parse_header(gguf_bytes(pair("tokenizer.ggml.tokens", VT.ARRAY, absurd), n_kv=1))


def string_array(items: list[str]) -> bytes:
    return struct.pack("<IQ", VT.STRING, len(items)) + b"".join(gguf_string(s) for s in items)


def int32_array(items: list[int]) -> bytes:
    return struct.pack("<IQ", VT.INT32, len(items)) + np.asarray(items, "<i4").tobytes()


# Split models: gguf-split's layout, written by hand from a small synthetic model


def write_split(source: Path, folder: Path, stem: str = "x") -> list[Path]:
    """Two parts: every key and the first half of the tensors, then the rest of the tensors."""
    reader = gguf.GGUFReader(source)
    half = len(reader.tensors) // 2
    paths = [folder / f"{stem}-{no:05d}-of-00002.gguf" for no in (1, 2)]
    arch = str(reader.fields["general.architecture"].contents())
    for no, (path, tensors) in enumerate(
        zip(paths, [reader.tensors[:half], reader.tensors[half:]], strict=True)
    ):
        writer = gguf.GGUFWriter(path, arch)
        if no == 0:
            copy_fields(reader, writer)
        writer.add_uint16(gguf.Keys.Split.LLM_KV_SPLIT_NO, no)
        writer.add_uint16(gguf.Keys.Split.LLM_KV_SPLIT_COUNT, 2)
        writer.add_int32(gguf.Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT, len(reader.tensors))
        for t in tensors:
            writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t in tensors:
            writer.write_tensor_data(t.data)
        writer.close()
    return paths


def copy_fields(reader: gguf.GGUFReader, writer: gguf.GGUFWriter) -> None:
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub_type = field.types[-1] if field.types[0] is VT.ARRAY else None
        writer.add_key_value(name, field.contents(), field.types[0], sub_type=sub_type)


def without_location(inventory_dict: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in inventory_dict.items() if k not in ("path", "file_bytes")}


@pytest.fixture(scope="module")
def split_once(tmp_path_factory: pytest.TempPathFactory, make_synthetic) -> tuple[Path, list[Path]]:
    source = make_synthetic("qwen3moe", "Q8_0")
    return source, write_split(source, tmp_path_factory.mktemp("split"))


@pytest.fixture
def split_model(tmp_path: Path, split_once: tuple[Path, list[Path]]) -> tuple[Path, list[Path]]:
    """A fresh copy of the split model's parts, for a test to break."""
    source, parts = split_once
    copies = [tmp_path / p.name for p in parts]
    for part, copy in zip(parts, copies, strict=True):
        shutil.copyfile(part, copy)
    return source, copies


def test_a_split_model_reads_like_the_whole_one(split_model: tuple[Path, list[Path]]) -> None:
    source, parts = split_model
    whole, split = read_inventory(source), read_inventory(parts[0])
    assert without_location(split.to_dict()) == without_location(whole.to_dict())
    assert split.file_bytes == sum(p.stat().st_size for p in parts)
    assert split.path == str(parts[0])
    second = read_local_header(parts[1])
    assert set(second.fields) == {"general.architecture", "split.no", "split.count",
                                  "split.tensors.count"}  # fmt: skip


def test_a_missing_part_is_named(split_model: tuple[Path, list[Path]]) -> None:
    _, parts = split_model
    parts[1].unlink()
    with pytest.raises(ModelFileError, match="missing") as raised:
        read_inventory(parts[0])
    assert parts[1].name in str(raised.value)


def test_a_later_part_points_to_the_first(split_model: tuple[Path, list[Path]]) -> None:
    _, parts = split_model
    with pytest.raises(ModelFileError, match=f"open its first part, {parts[0].name}"):
        read_inventory(parts[1])


def test_a_split_part_renamed_cannot_find_its_siblings(
    split_model: tuple[Path, list[Path]],
) -> None:
    _, parts = split_model
    renamed = parts[0].rename(parts[0].with_name("renamed.gguf"))
    with pytest.raises(ModelFileError, match="cannot be found"):
        read_inventory(renamed)


def test_a_header_promising_too_much_is_truncated_not_a_huge_read(tmp_path: Path) -> None:
    data = gguf_bytes(pair("a", VT.UINT8, b"\1"), n_kv=2**36)
    with pytest.raises(NeedMoreBytes) as short:
        parse_header(data)
    assert len(data) < short.value.needed <= 2**40
    path = tmp_path / "liar.gguf"
    path.write_bytes(data)
    with pytest.raises(ModelFileError, match=r"truncated GGUF \(its metadata count"):
        read_local_header(path)


def test_a_split_name_without_split_keys_is_one_file(tmp_path: Path, make_synthetic) -> None:
    """As in llama.cpp, the header's split.count decides; the name only finds the parts."""
    path = tmp_path / "y-00001-of-00002.gguf"
    shutil.copyfile(make_synthetic("llama", "F16"), path)
    assert read_inventory(path).file_bytes == path.stat().st_size
