"""Images a person gives the vision path: every bad case is one clear sentence."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from engine.errors import BadInputError
from engine.model.image_input import decode_image, read_image_file


def encoded(image: Image.Image, kind: str = "PNG", **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, kind, **options)
    return buffer.getvalue()


def test_a_photo_is_decoded_to_rgb_and_downscaled_to_the_plan_limit() -> None:
    photo = decode_image(encoded(Image.new("RGB", (400, 100), (10, 20, 30)), "JPEG"), "p.jpg", 200)
    assert (photo.width, photo.height) == (200, 50) and photo.downscaled
    assert len(photo.pixels) == 200 * 50 * 3
    assert photo.describe() == "p.jpg 400x100 px, downscaled to 200x50"
    same = decode_image(encoded(Image.new("RGB", (400, 100), (10, 20, 30)), "JPEG"), "q.jpg", 200)
    assert same.digest == photo.digest  # same pixels, same cache key, whatever the name


def test_transparency_becomes_white_and_webp_is_read() -> None:
    clear = decode_image(encoded(Image.new("RGBA", (4, 4), (0, 0, 0, 0)), "WEBP"), "c.webp")
    assert clear.pixels[:3] == b"\xff\xff\xff"


def test_an_animated_gif_gives_its_first_frame_and_says_so() -> None:
    frames = [Image.new("RGB", (8, 8), colour) for colour in ("red", "green", "blue")]
    data = encoded(frames[0], "GIF", save_all=True, append_images=frames[1:])
    gif = decode_image(data, "a.gif")
    assert gif.note == "animated GIF: the first frame"
    assert gif.pixels[:3] == decode_image(encoded(frames[0], "GIF"), "f.gif").pixels[:3]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (b"hello, not an image", "not an image"),
        (encoded(Image.new("RGB", (64, 64)), "PNG")[:60], "damaged or truncated"),
        (encoded(Image.new("RGB", (8, 8)), "TIFF"), "TIFF images are not supported"),
        (encoded(Image.new("1", (20_000, 20_000)), "PNG"), "too large (over 128 Mpx"),
        (encoded(Image.new("RGB", (1, 1)), "PNG"), "too small"),
    ],
    ids=["zero-bytes", "text", "truncated", "tiff", "enormous", "one-pixel"],
)
def test_bad_images_are_refused_in_one_line(data: bytes, message: str) -> None:
    with pytest.raises(BadInputError) as refused:
        decode_image(data, "x.png")
    text = str(refused.value)
    assert message in text and text.startswith("x.png: ") and "\n" not in text


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="no such image file"):
        read_image_file(tmp_path / "nowhere.png")
