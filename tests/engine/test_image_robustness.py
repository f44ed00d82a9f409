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

import struct
import time
from collections.abc import Callable

import pytest
from image_mutants import (
    after_ihdr,
    corpus,
    encoded,
    inflating_to,
    mpo,
    originals,
    png_chunk,
    sized_png,
    with_field,
)
from PIL import Image

from engine.errors import BadInputError
from engine.model.image_input import MIN_SIDE_PX, RgbImage, check_image, decode_image

SLOWEST_CASE_S = 5.0  # a decode of these small files takes milliseconds; seconds is a hang


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


def test_the_check_refuses_exactly_what_the_decoder_refuses() -> None:
    """check_image (the window's second opinion, and ask-image's) agrees with decode_image."""
    disagreements = []
    for cases in corpus().values():
        for name, data in cases:
            decoded, checked = verdict(decode_image, data, name), verdict(check_image, data, name)
            if decoded != checked:
                disagreements.append(f"{name}: decode {decoded}, check {checked}")
    assert not disagreements, "\n".join(disagreements)


def verdict(read: Callable[[bytes, str], object], data: bytes, name: str) -> str:
    try:
        read(data, name)
    except BadInputError as refusal:
        return str(refusal)
    return "read"
