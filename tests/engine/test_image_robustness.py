"""Damaged images, generated: every mutant of a real file is decoded or refused in one line.

Issue 28 found images whose damage escaped the decoder as an "internal error"
(a WebP cut in half, a PNG chunk that inflates to 32 MB, a flipped bit in a
PNG header, a BMP header field Pillow does not know). Here real files of every
format Pillow writes are mutated with a fixed seed (cut short, bits flipped,
header fields set to edge values, chunks that inflate to bombs) and each
mutant must end one of two ways: a valid RgbImage, or BadInputError that
names the file and the reason on one line. Anything else fails the test with
the mutants that escaped.
"""

from __future__ import annotations

import io
import random
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from functools import cache

import pytest
from PIL import Image

from engine.errors import BadInputError
from engine.model.image_input import MIN_SIDE_PX, RgbImage, decode_image

SEED = 28
FLIPS_PER_FILE = 16
FIELD_EDITS_PER_FILE = 8
SLOWEST_CASE_S = 5.0  # a decode of these small files takes milliseconds; seconds is a hang
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


def outcome(name: str, data: bytes) -> RgbImage | BadInputError:
    """The decode's result or its refusal; any other exception propagates to the caller."""
    try:
        return decode_image(data, name, max_side_px=16)
    except BadInputError as refusal:
        return refusal


def problem(name: str, data: bytes) -> str | None:
    """What is wrong with how this mutant ended, or None when it ended well."""
    started = time.perf_counter()
    try:
        result = outcome(name, data)
    except Exception as exc:  # the bug this suite hunts: anything but a refusal escaping
        return f"{name}: escaped as {type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - started
    if seconds > SLOWEST_CASE_S:
        return f"{name}: took {seconds:.1f} s"
    if isinstance(result, BadInputError):
        text = str(result)
        reason = text.removeprefix(f"{name}: ")
        if reason == text or len(reason) < 8 or "\n" in text:
            return f"{name}: refusal does not name the file and a reason on one line: {text!r}"
        return None
    fits = (
        min(result.width, result.height) >= MIN_SIDE_PX and max(result.width, result.height) <= 16
    )
    if not fits or len(result.pixels) != result.width * result.height * 3:
        return f"{name}: decoded to a malformed image {result!r}"
    return None


def test_the_corpus_covers_every_kind_of_damage() -> None:
    names = [name for cases in corpus().values() for name, _ in cases]
    assert len(names) > 600
    for kind in ("-cut", "-flip", "-field", "bomb", "mpo"):
        assert sum(kind in name for name in names) >= 3, kind


@pytest.mark.parametrize("original", list(originals()))
def test_every_mutant_is_decoded_or_refused_in_one_line(original: str) -> None:
    problems = [p for p in (problem(name, data) for name, data in corpus()[original]) if p]
    assert not problems, "\n".join(problems)


def bomb_png(kind: bytes, header: bytes) -> bytes:
    """A PNG whose text or colour-profile chunk inflates to 32 MB, as the issue measured."""
    return after_ihdr(originals()["rgb.png"], png_chunk(kind, header + inflating_to(32 * 2**20)))


def text_flood() -> bytes:
    """66 text chunks that each inflate to just under Pillow's 1 MB: 65 MB of text in all."""
    chunk = png_chunk(b"zTXt", b"c\0\0" + inflating_to(2**20 - 4096))
    return after_ihdr(originals()["rgb.png"], *[chunk] * 66)


ISSUE_CASES = [
    pytest.param("half.webp", lambda: originals()["lossy.webp"][:40], "damaged", id="webp-cut"),
    pytest.param("iccp.png", lambda: bomb_png(b"iCCP", b"icc\0\0"), "damaged", id="iccp-bomb"),
    pytest.param("ztxt.png", lambda: bomb_png(b"zTXt", b"Comment\0\0"), "damaged", id="ztxt-bomb"),
    pytest.param("flood.png", text_flood, "Too much memory used in text", id="text-flood"),
    pytest.param("short.png", lambda: originals()["rgb.png"][:16], "truncated", id="png-cut"),
    pytest.param(
        "depth.bmp", lambda: with_field(originals()["rgb.bmp"], 28, "<H", 520),
        "Unsupported BMP pixel depth", id="bmp-depth",
    ),
    pytest.param(
        "header.bmp", lambda: with_field(originals()["rgb.bmp"], 14, "<I", 44),
        "Unsupported BMP header", id="bmp-header",
    ),
    pytest.param(
        "huge.png", lambda: sized_png(10_000, 10_000), "10000x10000 px is too large",
        id="over-the-limit",
    ),
    pytest.param("bomb.png", lambda: sized_png(2**24, 16), "too large (over 128", id="pillow-bomb"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "make", "reason"), ISSUE_CASES)
def test_the_cases_the_issue_measured_are_refused_with_their_reason(
    name: str, make: Callable[[], bytes], reason: str
) -> None:
    with pytest.raises(BadInputError) as refused:
        decode_image(make(), name)
    text = str(refused.value)
    assert text.startswith(f"{name}: ") and reason in text and "\n" not in text


def test_a_jpeg_with_a_second_mpf_picture_is_read_as_its_first() -> None:
    camera = decode_image(mpo(), "camera.jpg")
    assert (camera.width, camera.height) == (24, 16)
    red, green, blue = camera.pixels[:3]
    assert red > 200 and green < 60 and blue < 60  # the first picture, not the blue second
    assert camera.describe() == "camera.jpg 24x16 px (JPEG with more pictures (MPO): the first)"


def test_an_animated_gif_is_not_read_through_to_count_its_frames() -> None:
    """A 50 MB GIF of tiny frames took a minute to count; the note says only 'animated'."""
    frame = b"\x2c" + struct.pack("<HHHHB", 0, 0, 2, 2, 0) + b"\x02\x02\x4c\x01\x00"
    screen = b"GIF89a" + struct.pack("<HHBBB", 2, 2, 0x80, 0, 0) + b"\xff\0\0\0\0\xff"
    many = screen + frame * 400_000 + b";"  # 5.7 MB: 6 s to count the frames
    started = time.perf_counter()
    gif = decode_image(many, "many.gif")
    assert time.perf_counter() - started < 2.0
    assert gif.note == "animated GIF: the first frame"


def test_a_long_thin_strip_keeps_two_pixels_when_downscaled() -> None:
    """Pillow's thumbnail made a 4000x2 strip 1000x1, under the encoder's two-pixel minimum."""
    strip = decode_image(encoded(Image.new("RGB", (4000, 2), "green"), "PNG"), "strip.png", 1000)
    assert (strip.width, strip.height) == (1000, MIN_SIDE_PX)
    assert strip.describe() == "strip.png 4000x2 px, downscaled to 1000x2"
