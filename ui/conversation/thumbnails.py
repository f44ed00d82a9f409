"""The conversation's images as thumbnails: read from the chat store when their row is first
drawn, decoded off the GUI thread, and the most recent THUMBNAILS_KEPT kept.

A conversation of hundreds of images opens as fast as one without: none is
read until its row is on screen, and the drawing goes on (a grey box meanwhile)
while the decoder works.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QImage

from engine.model.image_input import ImageFile
from ui.thread_bridge import Background

THUMBNAIL_PX = 240  # decoded at twice the drawn size, for high-DPI screens
THUMBNAILS_KEPT = 256
ImageSource = Callable[[int, int], ImageFile]  # (message id, image index) -> the image
Key = tuple[int, int]  # (message id, image index)


class Thumbnails(QObject):
    def __init__(self, redraw: Callable[[], None], parent: QObject | None = None) -> None:
        """`redraw` is called on the GUI thread when a thumbnail is ready to be drawn."""
        super().__init__(parent)
        self._redraw = redraw
        self._source: ImageSource | None = None
        self._kept: dict[Key, QImage] = {}
        self._decoding: set[Key] = set()
        self._decoder = Background("thumbnails", owner=self)
        self.images_read: list[Key] = []  # what was fetched from the store, in order

    def set_source(self, source: ImageSource | None) -> None:
        """Where images are read from (the chat store); what was kept is forgotten."""
        self._source = source
        self._kept.clear()

    def image(self, message_id: int, index: int) -> ImageFile | None:
        """The image whole (to open it), read now."""
        return self._source(message_id, index) if self._source is not None else None

    def get(self, message_id: int | None, index: int) -> QImage | None:
        """Drawn now: the thumbnail if decoded, else None and the image is read and decoded."""
        if message_id is None or self._source is None:
            return None
        key = (message_id, index)
        if key in self._kept:
            return self._kept[key]
        if key not in self._decoding:
            self._decoding.add(key)
            self.images_read.append(key)
            try:
                image = self._source(*key)
            except Exception:  # noqa: BLE001 - a deleted or unreadable image: a grey box
                image = ImageFile("", b"")
            self._decoder.run(lambda: decode_thumbnail(image.data), lambda t: self._keep(key, t))
        return None

    def shown(self) -> list[Key]:
        """The thumbnails decoded so far."""
        return list(self._kept)

    def shutdown(self) -> None:
        self._decoder.shutdown()

    def _keep(self, key: Key, image: QImage) -> None:
        self._decoding.discard(key)
        if len(self._kept) >= THUMBNAILS_KEPT:
            self._kept.pop(next(iter(self._kept)))
        self._kept[key] = image
        self._redraw()


def decode_thumbnail(data: bytes) -> QImage:
    """Off the GUI thread (QImage, unlike QPixmap, may be made on any thread)."""
    image = QImage.fromData(data)
    if image.isNull():
        image = QImage(THUMBNAIL_PX, THUMBNAIL_PX, QImage.Format.Format_RGB32)
        image.fill(0x808080)
    return image.scaled(
        THUMBNAIL_PX, THUMBNAIL_PX, Qt.AspectRatioMode.KeepAspectRatio,
        Qt.TransformationMode.SmoothTransformation,
    )  # fmt: skip
