"""Images a person attaches to the next message, and the strip that shows them.

Every image is decoded once, checked, and re-encoded as PNG: whatever the
source (a JPEG on disk, a WebP, the first frame of a GIF, a screenshot on the
clipboard), a vision model later receives one format, and a file that cannot
be decoded is refused here, with a one-line reason, before it reaches a message.
Formats are decided from the bytes, never from the file name, so a PNG saved
as `.jpg` works and a text file renamed `.png` is refused.

Qt decodes (it honours EXIF rotation) but is lenient: it pads a truncated JPEG,
BMP or GIF with grey and skips a PNG chunk that inflates to a bomb. So encoded
bytes Qt accepts also pass the engine's check (engine.model.image_input), and
the window refuses the files `shardchat ask-image` and the API refuse, in the
same words. Its own limits are stricter: MAX_SIDE_PX a side and MAX_PIXELS,
to stay under the 256 MB Qt allows one decoded image.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt, Signal
from PySide6.QtGui import QImage, QImageReader, QPixmap
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QToolButton, QWidget

from engine.errors import BadInputError
from engine.model.image_input import check_image

# Qt's reader format name -> how we name it to a person.
ACCEPTED_FORMATS = {"png": "PNG", "jpeg": "JPEG", "webp": "WebP", "bmp": "BMP", "gif": "GIF"}
ACCEPTED_LIST = "PNG, JPEG, WebP, BMP or GIF"
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".jfif", ".webp", ".bmp", ".gif"}
MAX_FILE_BYTES = 50 * 1024 * 1024
MAX_SIDE_PX = 16_384
# Qt refuses to decode more than 256 MB by default; 40 Mpx at 4 bytes a pixel stays under it.
MAX_PIXELS = 40_000_000
THUMBNAIL_PX = 64


@dataclass(frozen=True)
class ImageAttachment:
    """One attached image; `png_bytes` is exactly what a vision model will be given."""

    name: str
    png_bytes: bytes = field(repr=False)
    width: int
    height: int
    source_path: Path | None = None  # None for pasted image data


def load_image_file(path: str | os.PathLike[str]) -> ImageAttachment:
    """Read an image file the person dropped or pasted; BadInputError says why not."""
    path = Path(path)
    name = path.name
    if not path.is_file():
        raise BadInputError(f"{name}: not a file")
    size_bytes = path.stat().st_size
    if size_bytes > MAX_FILE_BYTES:
        limit = MAX_FILE_BYTES // (1024 * 1024)
        raise BadInputError(
            f"{name}: too large ({size_bytes / (1024 * 1024):.0f} MB; the limit is {limit} MB)"
        )
    try:
        data = path.read_bytes()
    except OSError as error:
        raise BadInputError(f"{name}: cannot be read ({error.strerror or error})") from error
    looks_like_image = path.suffix.lower() in IMAGE_SUFFIXES
    return image_from_bytes(data, name, source_path=path, looks_like_image=looks_like_image)


def image_from_bytes(
    data: bytes,
    name: str,
    source_path: Path | None = None,
    looks_like_image: bool = True,
) -> ImageAttachment:
    """Decode encoded image bytes (a file's content, or `image/png` clipboard data).

    `looks_like_image` only chooses the wording when the bytes are not any
    known format: a `.png` full of garbage is a broken image, a `.txt` is not
    an image at all.
    """
    buffer = QBuffer()
    buffer.setData(QByteArray(data))
    buffer.open(QIODevice.OpenModeFlag.ReadOnly)
    reader = QImageReader(buffer)
    reader.setAutoTransform(True)  # honour EXIF rotation: the model should see it upright
    image_format = bytes(reader.format().data()).decode("ascii", "replace")
    _check_format(name, image_format, looks_like_image)
    declared = reader.size()
    if declared.isValid():
        _check_dimensions(name, declared.width(), declared.height())
    image = reader.read()  # the first frame of an animated GIF
    if image.isNull():
        raise BadInputError(f"{name}: not a readable image ({reader.errorString()})")
    check_image(data, name)
    return _attachment(image, name, source_path)


def image_from_qimage(image: QImage, name: str) -> ImageAttachment:
    """Take decoded image data, as a paste of a screenshot delivers it."""
    if image.isNull():
        raise BadInputError(f"{name}: not a readable image (the pasted image is empty)")
    return _attachment(image, name, None)


def _check_format(name: str, image_format: str, looks_like_image: bool) -> None:
    if image_format in ACCEPTED_FORMATS:
        return
    if image_format:
        raise BadInputError(
            f"{name}: {image_format.upper()} images are not supported (use {ACCEPTED_LIST})"
        )
    if looks_like_image:
        raise BadInputError(f"{name}: not a readable image (the data is not {ACCEPTED_LIST})")
    raise BadInputError(f"{name}: not an image ({ACCEPTED_LIST})")


def _check_dimensions(name: str, width: int, height: int) -> None:
    if max(width, height) > MAX_SIDE_PX or width * height > MAX_PIXELS:
        raise BadInputError(
            f"{name}: too large ({width}×{height} px; the limit is {MAX_SIDE_PX} px a side"
            f" and {MAX_PIXELS // 1_000_000} megapixels)"
        )


def _attachment(image: QImage, name: str, source_path: Path | None) -> ImageAttachment:
    _check_dimensions(name, image.width(), image.height())
    return ImageAttachment(
        name=name,
        png_bytes=_encode_png(image),
        width=image.width(),
        height=image.height(),
        source_path=source_path,
    )


def _encode_png(image: QImage) -> bytes:
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    # PySide6 6.11's stubs type `format` as bytes, but the binding raises on bytes and takes str
    if not image.save(buffer, "PNG"):  # type: ignore[call-overload]  # stubs: bytes, binding: str
        raise BadInputError("the image could not be converted to PNG")
    return bytes(buffer.data().data())


class AttachmentStrip(QWidget):
    """Thumbnails of the attached images, each with a remove button; hidden when empty.

    It only renders the list it is given: whoever holds the attachments
    (the message input) removes one on `remove_requested(index)` and hands
    the new list back through `show_attachments`.
    """

    remove_requested = Signal(int)

    def __init__(self) -> None:
        super().__init__()
        self.setAccessibleName("Attached images")
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.addStretch(1)
        self._items: list[QWidget] = []
        self._thumbnails: dict[ImageAttachment, QPixmap] = {}
        self.setVisible(False)

    def show_attachments(self, attachments: list[ImageAttachment]) -> None:
        for item in self._items:
            item.hide()
            self._row.removeWidget(item)
            item.deleteLater()  # may be the button whose click got us here
        self._thumbnails = {a: self._thumbnail(a) for a in attachments}
        self._items = [self._item(index, a) for index, a in enumerate(attachments)]
        for position, item in enumerate(self._items):
            self._row.insertWidget(position, item)
            item.show()  # a layout would only show it on the next event loop turn
        self.setVisible(bool(attachments))

    def _thumbnail(self, attachment: ImageAttachment) -> QPixmap:
        if attachment in self._thumbnails:
            return self._thumbnails[attachment]
        # as in _encode_png: the stubs want bytes for `format`, the binding takes only str
        image = QImage.fromData(attachment.png_bytes, "PNG")  # type: ignore[arg-type]  # stubs wrong
        small = image.scaled(
            THUMBNAIL_PX,
            THUMBNAIL_PX,
            Qt.AspectRatioMode.KeepAspectRatio,
            Qt.TransformationMode.SmoothTransformation,
        )
        return QPixmap.fromImage(small)

    def _item(self, index: int, attachment: ImageAttachment) -> QWidget:
        item = QWidget(self)
        grid = QGridLayout(item)
        grid.setContentsMargins(0, 0, 0, 0)
        picture = QLabel()
        picture.setPixmap(self._thumbnails[attachment])
        picture.setFixedSize(THUMBNAIL_PX, THUMBNAIL_PX)
        picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        picture.setAccessibleName(attachment.name)
        picture.setToolTip(f"{attachment.name} ({attachment.width}×{attachment.height})")
        remove = QToolButton()
        remove.setText("×")
        remove.setAccessibleName(f"Remove {attachment.name}")
        remove.setToolTip(f"Remove {attachment.name}")
        remove.clicked.connect(lambda: self.remove_requested.emit(index))
        grid.addWidget(picture, 0, 0)
        grid.addWidget(remove, 0, 0, Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignRight)
        return item
