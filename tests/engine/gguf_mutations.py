"""Bad GGUF files made from good ones, for the robustness tests of the model-file checks.

Two kinds of damage, as a user meets them:
- values that parse but are wrong (`rewritten`): a hyper-parameter out of range, of the wrong
  type or not finite, an odd alignment. The file is written anew through gguf's own writer,
  so everything else about it stays valid and only the one value is bad.
- bytes that are wrong (`patched`): a count in the fixed header or a length in the tensor
  table overwritten in place, as a bad sector or a cut-off download leaves them.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path

import gguf

VT = gguf.GGUFValueType
Value = tuple[object, VT] | tuple[object, VT, VT] | None  # None deletes the key


def rewritten(
    source: Path, target: Path, changes: Mapping[str, Value], alignment: int | None = None
) -> Path:
    """`source` with some metadata values replaced, added or removed (and its data re-laid
    out for `alignment`, when given, as general.alignment then says)."""
    reader = gguf.GGUFReader(source, "r")
    arch = str(reader.get_field("general.architecture").contents())  # type: ignore[union-attr]
    writer = gguf.GGUFWriter(target, arch)
    writer.kv_data[0].clear()  # the writer adds general.architecture itself; the copy does
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):
            continue
        if field.name in changes:
            continue
        sub_type = field.types[-1] if field.types[0] is VT.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type)
    for key, value in changes.items():
        if value is not None:
            writer.add_key_value(key, value[0], value[1], value[2] if len(value) > 2 else None)
    if alignment is not None:
        writer.data_alignment = alignment
        if "general.alignment" not in changes:
            writer.add_key_value("general.alignment", alignment, VT.UINT32)
    for tensor in reader.tensors:
        writer.add_tensor_info(
            tensor.name,
            tensor.data.shape,
            tensor.data.dtype,
            tensor.data.nbytes,
            tensor.tensor_type,
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        writer.write_tensor_data(tensor.data)
    writer.close()
    return target


def patched(source: Path, target: Path, offset: int, fmt: str, value: int) -> Path:
    """`source` with the number at byte `offset` (struct format `fmt`) overwritten."""
    data = bytearray(source.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    target.write_bytes(bytes(data))
    return target


N_TENSORS_AT = 8  # magic, version: the fixed header's counts follow
N_KV_AT = 16


def string_length_at(source: Path, key: str) -> int:
    """Where the length of the string value `key` lies in `source`, to be `patched`."""
    field = gguf.GGUFReader(source, "r").fields[key]
    key_length, key_bytes, value_type = field.parts[:3]
    return field.offset + key_length.nbytes + key_bytes.nbytes + value_type.nbytes
