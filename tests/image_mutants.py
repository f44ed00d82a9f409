"""Damaged images, generated: real files of every format Pillow writes, and their mutants.

The same seeded corpus feeds the decoder's robustness test (tests/engine) and
the window's (tests/ui): each original is cut short at header and body
boundaries, bit-flipped (every other time within its first 96 bytes, where
headers live), and has header fields set to values decoders trip on; some
originals carry chunks that inflate to bombs, one is a JPEG with a second MPF
picture (MPO).
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from collections.abc import Callable, Iterator
from functools import cache

from PIL import Image

SEED = 28
FLIPS_PER_FILE = 16
FIELD_EDITS_PER_FILE = 8
BOMB_BYTES = 4 * 2**20  # four times what Pillow inflates a PNG text chunk to (1 MB)


def picture(mode: str = "RGB", size: tuple[int, int] = (24, 16)) -> Image.Image:
    """Small gradients, so the encoders have real data to compress."""
    across, down = Image.linear_gradient("L"), Image.linear_gradient("L").rotate(90)
    layers = [layer.resize(size) for layer in (across, down, Image.radial_gradient("L"))]
    return Image.merge("RGB", layers).convert(mode)


def encoded(image: Image.Image, kind: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, kind, **options)
    return buffer.getvalue()


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def after_ihdr(png: bytes, *chunks: bytes) -> bytes:
    """Chunks placed where encoders put metadata: right after the 33-byte signature+IHDR."""
    return png[:33] + b"".join(chunks) + png[33:]


@cache
def inflating_to(size: int) -> bytes:
    return zlib.compress(bytes(size), 1)


def mpo() -> bytes:
    """Two JPEG pictures in one file, as phones write a photo and its preview."""
    second = Image.new("RGB", (24, 16), "blue")
    return encoded(Image.new("RGB", (24, 16), "red"), "MPO", save_all=True, append_images=[second])


@cache
def originals() -> dict[str, bytes]:
    """One real file per format and flavour, as Pillow writes them."""
    png = encoded(picture(), "PNG")
    frames = [picture("P"), Image.new("P", (24, 16), 3)]
    bomb = inflating_to(BOMB_BYTES)
    return {
        "rgb.png": png,
        "palette.png": encoded(picture("P"), "PNG", transparency=0),
        "alpha.png": encoded(picture("RGBA"), "PNG"),
        "grey16.png": encoded(picture("I;16"), "PNG"),
        "iccp-bomb.png": after_ihdr(png, png_chunk(b"iCCP", b"icc\0\0" + bomb)),
        "ztxt-bomb.png": after_ihdr(png, png_chunk(b"zTXt", b"Comment\0\0" + bomb)),
        "itxt-bomb.png": after_ihdr(png, png_chunk(b"iTXt", b"Comment\0\1\0\0\0" + bomb)),
        "photo.jpg": encoded(picture(), "JPEG", quality=90),
        "progressive.jpg": encoded(picture(), "JPEG", progressive=True),
        "grey.jpg": encoded(picture("L"), "JPEG"),
        "camera.mpo.jpg": mpo(),
        "still.gif": encoded(picture("P"), "GIF"),
        "animated.gif": encoded(frames[0], "GIF", save_all=True, append_images=frames[1:]),
        "lossy.webp": encoded(picture(), "WEBP", quality=80),
        "lossless.webp": encoded(picture("RGBA"), "WEBP", lossless=True),
        "rgb.bmp": encoded(picture(), "BMP"),
        "palette.bmp": encoded(picture("P"), "BMP"),
        "scan.tiff": encoded(picture(), "TIFF"),
        "packed.tiff": encoded(picture(), "TIFF", compression="tiff_deflate"),
        "icon.ico": encoded(picture(size=(32, 32)), "ICO"),
    }


# header fields worth breaking: (offset, struct format) of each format's sizes, depths and codes
def png_fields(data: bytes) -> list[tuple[int, str]]:
    """IHDR's width, height, bit depth, colour type, compression, filter and interlace."""
    return [(16, ">I"), (20, ">I"), (24, "B"), (25, "B"), (26, "B"), (27, "B"), (28, "B")]


def jpeg_fields(data: bytes) -> list[tuple[int, str]]:
    """The frame header (SOF): precision, height, width, component count, a sampling factor."""
    sof = min(data.find(marker) for marker in (b"\xff\xc0", b"\xff\xc2") if marker in data)
    return [(sof + 2, ">H"), (sof + 4, "B"), (sof + 5, ">H"), (sof + 7, ">H"), (sof + 9, "B"),
            (sof + 11, "B")]  # fmt: skip


def gif_fields(data: bytes) -> list[tuple[int, str]]:
    """The screen's size and flags; the first image's place, size and flags."""
    image = data.index(b",", 13)
    return [(6, "<H"), (8, "<H"), (10, "B"), (image + 1, "<H"), (image + 5, "<H"),
            (image + 7, "<H"), (image + 9, "B"), (image + 10, "B")]  # fmt: skip


def bmp_fields(data: bytes) -> list[tuple[int, str]]:
    """Pixel offset, header size, width, height, planes, depth, compression, palette size."""
    return [(10, "<I"), (14, "<I"), (18, "<I"), (22, "<I"), (26, "<H"), (28, "<H"), (30, "<I"),
            (46, "<I")]  # fmt: skip


def webp_fields(data: bytes) -> list[tuple[int, str]]:
    """The RIFF size, the first chunk's size, and the bitstream's size fields."""
    return [(4, "<I"), (16, "<I"), (26, "<H"), (28, "<H"), (21, "<I")]


def tiff_fields(data: bytes) -> list[tuple[int, str]]:
    """The first directory's offset, entry count and the first entries' types and counts."""
    first = struct.unpack("<I", data[4:8])[0]
    entries = [(first + 2 + 12 * n + part, kind) for n in range(4) for part, kind in
               ((2, "<H"), (4, "<I"), (8, "<I"))]  # fmt: skip
    return [(4, "<I"), (first, "<H"), *entries]


def ico_fields(data: bytes) -> list[tuple[int, str]]:
    """The image count; the first entry's size, colours, planes, depth, length and offset."""
    return [(4, "<H"), (6, "B"), (7, "B"), (8, "B"), (10, "<H"), (12, "<H"), (14, "<I"),
            (18, "<I")]  # fmt: skip


FIELDS: dict[str, Callable[[bytes], list[tuple[int, str]]]] = {
    "png": png_fields, "jpg": jpeg_fields, "gif": gif_fields, "bmp": bmp_fields,
    "webp": webp_fields, "tiff": tiff_fields, "ico": ico_fields,
}  # fmt: skip


def edge_value(kind: str, rng: random.Random) -> int:
    """Mostly the values decoders trip on (0, 1, powers of two, the largest), sometimes any."""
    top = 2 ** (8 * struct.calcsize(kind)) - 1
    if rng.random() < 0.2:
        return rng.randrange(top + 1)
    return min(top, rng.choice([0, 1, 2, 3, 7, 8, 15, 16, 24, 32, 255, 65535, 2**31, top]))


def with_field(data: bytes, offset: int, kind: str, value: int) -> bytes:
    """The file with one header field set; a PNG's IHDR gets a correct CRC, so the
    decoder acts on the value instead of stopping at the checksum."""
    edited = bytearray(data)
    struct.pack_into(kind, edited, offset, value)
    if edited[12:16] == b"IHDR":
        edited[29:33] = struct.pack(">I", zlib.crc32(bytes(edited[12:29])))
    return bytes(edited)


def sized_png(width: int, height: int) -> bytes:
    """A small PNG whose header claims another size (its pixel data is never reached)."""
    return with_field(with_field(originals()["rgb.png"], 16, ">I", width), 20, ">I", height)


def mutants(name: str, data: bytes, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    """The file itself, cut short at header and body boundaries, bit-flipped, field-edited."""
    yield name, data
    cuts = {1, 4, 8, 12, 16, 24, 26, 30, 33, 40, 64, len(data) // 4, len(data) // 2,
            len(data) * 3 // 4, len(data) - 1}  # fmt: skip
    for cut in sorted(c for c in cuts if 0 < c < len(data)):
        yield f"{name}-cut{cut}", data[:cut]
    for number in range(FLIPS_PER_FILE):
        flipped = bytearray(data)
        near_start = number % 2 == 0  # headers live in the first bytes; every other flip hits them
        for _ in range(rng.randint(1, 4)):
            where = rng.randrange(min(len(data), 96) if near_start else len(data))
            flipped[where] ^= 1 << rng.randrange(8)
        yield f"{name}-flip{number}", bytes(flipped)
    fields = FIELDS[name.rsplit(".", 1)[1]](data)
    for number in range(FIELD_EDITS_PER_FILE):
        offset, kind = rng.choice(fields)
        value = edge_value(kind, rng)
        yield f"{name}-field{number}@{offset}={value}", with_field(data, offset, kind, value)


@cache
def corpus() -> dict[str, list[tuple[str, bytes]]]:
    """Each original file's mutants, the same on every run (one seeded generator)."""
    rng = random.Random(SEED)
    return {name: list(mutants(name, data, rng)) for name, data in originals().items()}
