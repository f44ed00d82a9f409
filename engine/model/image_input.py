"""Images as the vision encoder receives them: decoded, checked, downscaled, as RGB pixels.

Decoding happens here, with Pillow, rather than in mtmd's bundled stb_image:
a corrupt, truncated or enormous file then becomes a one-line refusal before
any llama.cpp code sees it, WebP works, and an oversized image is downscaled
to what the plan allows (VLMOpt) before preprocessing, so the encoder never
holds a full-resolution copy. Formats are decided from the bytes, not the name.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from engine.errors import BadInputError

ACCEPTED_FORMATS = {"PNG": "PNG", "JPEG": "JPEG", "WEBP": "WebP", "BMP": "BMP", "GIF": "GIF"}
MAX_FILE_BYTES = 50 * 1024 * 1024
MAX_PIXELS = 64_000_000  # decoding more takes gigabytes of RAM; no encoder wants it
MIN_SIDE_PX = 2


@dataclass(frozen=True)
class ImageFile:
    """An image as a person gave it: a name and its encoded bytes (PNG, JPEG, ...).

    Conversations keep images in this form (it is what the chat store saves);
    the vision runtime decodes them, at the size the plan allows, when a turn
    needs them.
    """

    name: str
    data: bytes = field(repr=False)

    @cached_property
    def key(self) -> str:
        """Identifies the bytes (computed once: images run to megabytes)."""
        return hashlib.sha256(self.data).hexdigest()[:32]


@dataclass(frozen=True)
class RgbImage:
    """Decoded pixels (rows of RGB bytes) plus what a person should know about them."""

    name: str
    width: int
    height: int
    pixels: bytes = field(repr=False)
    source_width: int
    source_height: int
    note: str = ""  # e.g. "animated GIF: the first of 12 frames"

    @property
    def digest(self) -> str:
        """Identifies the pixels the encoder sees (the cache key for their embeddings)."""
        sizes = f"{self.width}x{self.height}:".encode()
        return hashlib.sha256(sizes + self.pixels).hexdigest()[:32]

    @property
    def downscaled(self) -> bool:
        return (self.width, self.height) != (self.source_width, self.source_height)

    def describe(self) -> str:
        """'photo.jpg 4000x3000 px, downscaled to 1280x960' and any note."""
        text = f"{self.name} {self.source_width}x{self.source_height} px"
        if self.downscaled:
            text += f", downscaled to {self.width}x{self.height}"
        return f"{text} ({self.note})" if self.note else text


def read_image_file(path: str | os.PathLike[str], max_side_px: int = 0) -> RgbImage:
    """An image file from disk, decoded; refused with a one-line reason if it cannot be used."""
    image = image_file(path, check=False)
    return decode_image(image.data, image.name, max_side_px)


def image_file(path: str | os.PathLike[str], check: bool = True) -> ImageFile:
    """An image file's bytes; with `check`, decoded once so a bad file is refused now."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError(f"{path}: no such image file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise BadInputError(
            f"{path.name}: too large ({size / 2**20:.0f} MB; the limit is "
            f"{MAX_FILE_BYTES // 2**20} MB)"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInputError(f"{path.name}: cannot be read ({exc.strerror or exc})") from exc
    if check:
        decode_image(data, path.name)
    return ImageFile(path.name, data)


def decode_image(data: bytes, name: str, max_side_px: int = 0) -> RgbImage:
    """Encoded image bytes to RGB pixels, downscaled so the longer side is <= max_side_px."""
    if not data:
        raise BadInputError(f"{name}: the file is empty (zero bytes)")
    image = _open(data, name)
    width, height = image.size
    note = _first_frame_note(image)
    try:
        rgb = _as_rgb(image)
    except (OSError, SyntaxError, ValueError) as exc:  # truncated or corrupt pixel data
        raise BadInputError(f"{name}: the image data is damaged or truncated ({exc})") from exc
    if max_side_px and max(width, height) > max_side_px:
        rgb.thumbnail((max_side_px, max_side_px), Image.Resampling.LANCZOS)
    return RgbImage(name, rgb.width, rgb.height, rgb.tobytes(), width, height, note)


def _open(data: bytes, name: str) -> Image.Image:
    """Read the header only; MAX_PIXELS below (not Pillow's bomb check) limits the size,
    so an enormous image is refused with its dimensions."""
    limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError as exc:
        raise BadInputError(
            f"{name}: not an image this app can read (use {', '.join(ACCEPTED_FORMATS.values())})"
        ) from exc
    finally:
        Image.MAX_IMAGE_PIXELS = limit
    kind = image.format or "?"
    if kind not in ACCEPTED_FORMATS:
        raise BadInputError(
            f"{name}: {kind} images are not supported (use {', '.join(ACCEPTED_FORMATS.values())})"
        )
    width, height = image.size
    if width * height > MAX_PIXELS:
        raise BadInputError(
            f"{name}: {width}x{height} px is too large ({width * height / 1e6:.0f} Mpx; the "
            f"limit is {MAX_PIXELS / 1e6:.0f} Mpx); scale it down first"
        )
    if min(width, height) < MIN_SIDE_PX:
        raise BadInputError(f"{name}: {width}x{height} px is too small to look at")
    return image


def _first_frame_note(image: Image.Image) -> str:
    frames = getattr(image, "n_frames", 1)
    if frames > 1:
        image.seek(0)
        return f"animated {ACCEPTED_FORMATS[image.format or 'GIF']}: the first of {frames} frames"
    return ""


def _as_rgb(image: Image.Image) -> Image.Image:
    """RGB pixels; transparent areas become white, as most viewers show them."""
    image.load()
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")
