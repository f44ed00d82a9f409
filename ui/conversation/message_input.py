"""The message box: Enter sends, Shift+Enter starts a new line, Esc stops the reply.

Images pasted or dropped into it (image data or image files) become
attachments of the next message instead of text; a file that is not a usable
image is refused as a whole, and neither the text nor the attachments change.
The refusal stays in sight where the image was dropped: a line at the
bottom of the input itself, wrapped to its width and never cut off (the input
grows by its height), until the next image is attached or the message sent;
it is also emitted on `attachment_refused`.

A message is the text and the attachments together. `submit` clears the text
and emits `submitted(text)` (text may be empty when images are attached) but
leaves the attachments alone: the slot calls `take_attachments()` once it
accepts the message, and a slot that refuses it (busy, a model without
vision) leaves them in place for the person to send again.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QMimeData, Qt, Signal
from PySide6.QtGui import QImage, QKeyEvent, QPixmap
from PySide6.QtWidgets import QLabel, QPlainTextEdit

from engine.errors import BadInputError
from ui.conversation.image_attachments import (
    ImageAttachment,
    image_from_bytes,
    image_from_qimage,
    load_image_file,
)
from ui.theme import error_style

# Encoded image types a browser or image viewer may put on the clipboard.
IMAGE_MIME_TYPES = ("image/png", "image/jpeg", "image/webp", "image/bmp", "image/gif")
MODEL_SUFFIX = ".gguf"
INPUT_MAX_PX = 120  # the text area's height at most; a refusal line adds its own
REFUSAL_PADDING_PX = 4


class MessageInput(QPlainTextEdit):
    submitted = Signal(str)
    stop_requested = Signal()
    attachments_changed = Signal(list)  # list[ImageAttachment], the whole new list
    attachment_refused = Signal(str)  # one-line reason for the person

    def __init__(self) -> None:
        super().__init__()
        self.setAccessibleName("Message")
        self.setPlaceholderText(
            "Message (Enter sends, Shift+Enter new line, Esc stops; paste or drop images)"
        )
        self.setMaximumHeight(INPUT_MAX_PX)
        self._attachments: list[ImageAttachment] = []
        self._pasted_count = 0
        self.refusal = QLabel(self)
        self.refusal.setAccessibleName("Image refused")
        self.refusal.setWordWrap(True)
        self.refusal.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.refusal.hide()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt's name
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
            event.modifiers() & Qt.KeyboardModifier.ShiftModifier
        ):
            self.submit()
            return
        if event.key() == Qt.Key.Key_Escape:
            self.stop_requested.emit()
            return
        super().keyPressEvent(event)

    def submit(self) -> None:
        """Send the text and attachments; images alone are a message too."""
        text = self.toPlainText()
        if not text.strip() and not self._attachments:
            return
        self.clear()
        self.clear_refusal()
        self.submitted.emit(text)

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        """The text area resizes with the input and when its scroll bar comes or goes."""
        if event.type() == QEvent.Type.Resize and not self.refusal.isHidden():
            self._place_refusal()
        return super().viewportEvent(event)

    # --- the refusal line ---

    def show_refusal(self, reason: str) -> None:
        """Say why an image was not attached, at the bottom of the input, until the next
        attachment or send; also for images dropped elsewhere on the window."""
        self.refusal.setText(reason)
        self.refusal.setToolTip(reason)
        self.refusal.setStyleSheet(error_style(self))
        self.refusal.show()
        self._place_refusal()
        self.attachment_refused.emit(reason)

    def clear_refusal(self) -> None:
        if not self.refusal.isHidden():
            self.refusal.hide()
            self._place_refusal()

    def _place_refusal(self) -> None:
        """The line below the text area, as wide as it (never under the scroll bar): the
        viewport gives up the line's height at the bottom, and the input grows by as much."""
        if self.refusal.isHidden():
            self.setViewportMargins(0, 0, 0, 0)
            self.setMaximumHeight(INPUT_MAX_PX)
            return
        width = max(1, self.viewport().width() - 2 * REFUSAL_PADDING_PX)
        height = self.refusal.heightForWidth(width)
        bottom = height + 2 * REFUSAL_PADDING_PX
        if self.viewportMargins().bottom() != bottom:  # unchanged: no resize event, no loop
            self.setViewportMargins(0, 0, 0, bottom)
            self.setMaximumHeight(INPUT_MAX_PX + bottom)
        text_area = self.viewport().geometry()
        self.refusal.setGeometry(
            text_area.left() + REFUSAL_PADDING_PX,
            text_area.bottom() + 1 + REFUSAL_PADDING_PX,
            width,
            height,
        )

    # --- attachments ---

    def attachments(self) -> list[ImageAttachment]:
        return list(self._attachments)

    def take_attachments(self) -> list[ImageAttachment]:
        """The attachments, cleared from the input: what accepting a message calls."""
        taken = self.attachments()
        self.clear_attachments()
        return taken

    def remove_attachment(self, index: int) -> None:
        if 0 <= index < len(self._attachments):
            del self._attachments[index]
            self.attachments_changed.emit(self.attachments())

    def clear_attachments(self) -> None:
        if self._attachments:
            self._attachments.clear()
            self.attachments_changed.emit([])

    def add_attachments(self, attachments: list[ImageAttachment]) -> None:
        if attachments:
            self._attachments.extend(attachments)
            self.clear_refusal()
            self.attachments_changed.emit(self.attachments())

    # --- paste and drop: QPlainTextEdit routes both through these two ---

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802 - Qt's name
        """Dragged models are refused here, so the drag goes on to the window, which loads them."""
        files = _local_files(source)
        if files and all(path.lower().endswith(MODEL_SUFFIX) for path in files):
            return False
        return bool(files) or _has_image(source) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 - Qt's name
        if not (_local_files(source) or _has_image(source)):
            super().insertFromMimeData(source)
            return
        try:
            attachments = self._attachments_from(source)
        except BadInputError as error:
            self.show_refusal(str(error))
            return
        self.add_attachments(attachments)

    def _attachments_from(self, source: QMimeData) -> list[ImageAttachment]:
        """All images in the paste or drop, or BadInputError for the first bad one."""
        files = _local_files(source)
        if files:
            return [load_image_file(path) for path in files]
        name = f"pasted image {self._pasted_count + 1}.png"
        if source.hasImage():
            attachment = image_from_qimage(_as_qimage(source.imageData()), name)
        else:
            mime_type = next(t for t in IMAGE_MIME_TYPES if source.hasFormat(t))
            attachment = image_from_bytes(bytes(source.data(mime_type).data()), name)
        self._pasted_count += 1
        return [attachment]


def _local_files(source: QMimeData) -> list[str]:
    """The dropped or pasted files, when every URL is a local file (else it is text)."""
    if not source.hasUrls():
        return []
    urls = source.urls()
    if not urls or not all(url.isLocalFile() for url in urls):
        return []
    return [url.toLocalFile() for url in urls]


def _has_image(source: QMimeData) -> bool:
    return source.hasImage() or any(source.hasFormat(t) for t in IMAGE_MIME_TYPES)


def _as_qimage(image_data: object) -> QImage:
    if isinstance(image_data, QImage):
        return image_data
    if isinstance(image_data, QPixmap):
        return image_data.toImage()
    return QImage()
