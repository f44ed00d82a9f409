"""Images as the vision encoder receives them: decoded, checked, downscaled, as RGB pixels.

Decoding happens here, with Pillow, rather than in mtmd's bundled stb_image:
a corrupt, truncated or enormous file then becomes a one-line refusal before
any llama.cpp code sees it, WebP works, and an oversized image is downscaled
to what the plan allows (VLMOpt) before preprocessing, so the encoder never
holds a full-resolution copy. Formats are decided from the bytes, not the name.

Every image is decoded whole, here, before anything is queued, and a damaged
one ends as BadInputError naming the file and the reason, whatever Pillow
raised: its plugins answer damaged data with a dozen exception types (OSError
from a WebP cut in half or a BMP header field Pillow does not know, ValueError
from a PNG text chunk that inflates too far, SyntaxError, struct.error,
EOFError, ...; tests/engine/test_image_robustness.py mutates real files to find
them). The limits, set here on purpose:

- MAX_FILE_BYTES (50 MB) is read at most;
- MAX_PIXELS (64 Mpx) is decoded at most, checked from the header before any
  pixel is: decoding more takes gigabytes of RAM and no encoder wants it.
  Pillow's own bomb check (Image.MAX_IMAGE_PIXELS) is set to the same number,
  so a header or a GIF frame past twice that (128 Mpx) is refused by Pillow
  itself, before our check sees it (without the size: Pillow's error does not
  carry it);
- a PNG text or colour-profile chunk may inflate to PngImagePlugin.MAX_TEXT_CHUNK
  (1 MB), all of them together to MAX_TEXT_MEMORY (64 MB); past that the file
  is refused as damaged;
- truncated pixel data is refused (ImageFile.LOAD_TRUNCATED_IMAGES stays off):
  a model shown a half-grey picture answers about the grey.

Not bounded but by MAX_FILE_BYTES: time. Pillow walks PNG chunks and JPEG
markers in Python, about a second per MB of a crafted file made of empty
ones, so a 50 MB one takes a minute before it is refused. (A GIF's frames,
which took as long to count, are no longer counted.)

A JPEG that carries further pictures in an MPF segment (Pillow calls it MPO:
phones and cameras write them, with a preview or a depth map) is read as its
first picture, an ordinary JPEG. Pillow's warnings about damaged metadata are
silenced: the image is then decoded or refused on its own terms, and a
warning would turn a one-line refusal into three lines.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import BadInputError

if TYPE_CHECKING:  # Pillow itself comes with the first image (_pillow)
    from PIL import Image

ACCEPTED_FORMATS = {"PNG": "PNG", "JPEG": "JPEG", "WEBP": "WebP", "BMP": "BMP", "GIF": "GIF"}
READ_AS = {"MPO": "JPEG"}  # a JPEG with more pictures after it: its first is read
_ACCEPTED = ", ".join(ACCEPTED_FORMATS.values())
MAX_FILE_BYTES = 50 * 1024 * 1024
MAX_PIXELS = 64_000_000  # decoding more takes gigabytes of RAM; no encoder wants it
MIN_SIDE_PX = 2


@functools.cache
def _pillow() -> None:
    """Import Pillow and set its limits, at the first image: the window and the engine
    start without it (about 15 ms)."""
    from PIL import Image, PngImagePlugin

    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    PngImagePlugin.MAX_TEXT_CHUNK = 1024 * 1024
    PngImagePlugin.MAX_TEXT_MEMORY = 64 * 1024 * 1024
    warnings.filterwarnings("ignore", module=r"PIL\.")


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
        check_image(data, path.name)
    return ImageFile(path.name, data)


def decode_image(data: bytes, name: str, max_side_px: int = 0) -> RgbImage:
    """Encoded image bytes to RGB pixels, downscaled so the longer side is <= max_side_px.

    Only BadInputError leaves it, whatever the bytes: callers (the CLI, the API,
    the chat) answer that with a refusal and have nothing else to catch.
    """
    image, note = _loaded(data, name)
    width, height = image.size
    try:
        rgb = _as_rgb(image)
        if max_side_px and max(width, height) > max_side_px:
            rgb = _downscaled(rgb, max_side_px)
    except Exception as exc:  # Pillow's answer to pixels it cannot convert, any type
        raise _damaged(name, exc) from exc
    return RgbImage(name, rgb.width, rgb.height, rgb.tobytes(), width, height, note)


def check_image(data: bytes, name: str) -> None:
    """Refuse what decode_image refuses, at a third of its cost (no RGB copy): for a
    reader that decodes on its own (the window's, Qt, which pads a truncated JPEG
    with grey) and must still refuse the files the CLI and the API refuse."""
    _loaded(data, name)


def _loaded(data: bytes, name: str) -> tuple[Image.Image, str]:
    """The first frame decoded, and a note on the frames left out."""
    if not data:
        raise BadInputError(f"{name}: the file is empty (zero bytes)")
    _pillow()
    from PIL import Image

    image = _open(data, name)
    try:
        note = _first_frame_note(image)
        image.load()
    except Image.DecompressionBombError as exc:  # a GIF frame far larger than its screen
        raise _too_large(name) from exc
    except Exception as exc:  # Pillow's answer to damaged pixel data, any type
        raise _damaged(name, exc) from exc
    return image, note


def _open(data: bytes, name: str) -> Image.Image:
    """Read the header only, and check what it says before any pixel is decoded."""
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError as exc:
        raise BadInputError(f"{name}: not an image this app can read (use {_ACCEPTED})") from exc
    except Image.DecompressionBombError as exc:
        raise _too_large(name) from exc
    except Exception as exc:  # a damaged header, whatever Pillow raises for it
        raise _damaged(name, exc) from exc
    kind = image.format or "?"
    if kind not in ACCEPTED_FORMATS and kind not in READ_AS:
        raise BadInputError(f"{name}: {kind} images are not supported (use {_ACCEPTED})")
    width, height = image.size
    if width * height > MAX_PIXELS:
        raise BadInputError(
            f"{name}: {width}x{height} px is too large ({width * height / 1e6:.0f} Mpx; the "
            f"limit is {MAX_PIXELS / 1e6:.0f} Mpx); scale it down first"
        )
    if min(width, height) < MIN_SIDE_PX:
        raise BadInputError(f"{name}: {width}x{height} px is too small to look at")
    return image


def _too_large(name: str) -> BadInputError:
    """Pillow's bomb error names its limit but not the image's size, so neither do we."""
    return BadInputError(
        f"{name}: too large (over {2 * MAX_PIXELS / 1e6:.0f} Mpx; the limit is "
        f"{MAX_PIXELS / 1e6:.0f} Mpx); scale it down first"
    )


def _damaged(name: str, exc: Exception) -> BadInputError:
    reason = " ".join(str(exc).split())[:160] or type(exc).__name__
    return BadInputError(f"{name}: the image data is damaged or truncated ({reason})")


def _downscaled(image: Image.Image, max_side_px: int) -> Image.Image:
    """The longer side at max_side_px; the shorter never below MIN_SIDE_PX, so a long thin
    strip that passed the size check is not squeezed to one pixel on its way to the encoder."""
    from PIL import Image

    scale = max_side_px / max(image.size)
    size = [max(MIN_SIDE_PX, round(side * scale)) for side in image.size]
    return image.resize((size[0], size[1]), Image.Resampling.LANCZOS, reducing_gap=2.0)


def _first_frame_note(image: Image.Image) -> str:
    """Asks only whether a second frame exists: counting a GIF's frames reads them all,
    a minute for a crafted 50 MB file of tiny frames."""
    if not getattr(image, "is_animated", False):
        return ""
    image.seek(0)
    kind = image.format or "GIF"
    if kind in READ_AS:
        return f"{READ_AS[kind]} with more pictures ({kind}): the first"
    return f"animated {ACCEPTED_FORMATS[kind]}: the first frame"


def _as_rgb(image: Image.Image) -> Image.Image:
    """RGB pixels; transparent areas become white, as most viewers show them."""
    from PIL import Image

    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")
