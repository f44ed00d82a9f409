"""Dropping files onto a window: which local files a drag carries, and a filter that takes them.

Why a filter and not a subclass: the main window and the model manager both
take dropped models, and an event filter adds that to any widget without
changing its class. It takes every local file, not only .gguf ones, so the
receiver can refuse the others with a reason instead of the drop silently
doing nothing.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QMimeData, QObject, Signal
from PySide6.QtGui import QDragMoveEvent, QDropEvent
from PySide6.QtWidgets import QWidget

GGUF_SUFFIX = ".gguf"
_DRAG_EVENTS = (QEvent.Type.DragEnter, QEvent.Type.DragMove)


def dropped_paths(mime: QMimeData) -> list[Path]:
    """The local files a drag carries, in order; web links and other data are left out."""
    if not mime.hasUrls():
        return []
    return [Path(url.toLocalFile()) for url in mime.urls() if url.isLocalFile()]


def gguf_paths(mime: QMimeData) -> list[Path]:
    """The dragged local files whose names end in .gguf (any case)."""
    return [path for path in dropped_paths(mime) if path.name.lower().endswith(GGUF_SUFFIX)]


class GgufDropFilter(QObject):
    """Makes `widget` (and any widget passed to `watch`) accept dropped files.

    A drag is accepted when it carries at least one local file; the drop emits
    `files_dropped` with all of them, as Paths. With `gguf_only` only .gguf
    files count, and other drags (an image for the message box) pass on
    untouched to the widget's own handling.
    """

    files_dropped = Signal(list)  # list[Path]

    def __init__(self, widget: QWidget, gguf_only: bool = False) -> None:
        super().__init__(widget)
        self._paths = gguf_paths if gguf_only else dropped_paths
        self.watch(widget)

    def watch(self, widget: QWidget) -> None:
        """Take drops on another widget too (e.g. a text box that would insert the file's URL)."""
        widget.setAcceptDrops(True)
        widget.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() in _DRAG_EVENTS and isinstance(event, QDragMoveEvent):
            return self._on_drag(event)  # QDragEnterEvent is a QDragMoveEvent
        if event.type() == QEvent.Type.Drop and isinstance(event, QDropEvent):
            return self.handle_drop(event.mimeData(), event)
        return super().eventFilter(watched, event)

    def handle_drop(self, mime: QMimeData, event: QDropEvent | None = None) -> bool:
        """Emit the dropped files; False (the drop is not ours) when there are none."""
        paths = self._paths(mime)
        if not paths:
            return False
        if event is not None:
            event.acceptProposedAction()
        self.files_dropped.emit(paths)
        return True

    def _on_drag(self, event: QDragMoveEvent) -> bool:
        if not self._paths(event.mimeData()):
            return False
        event.acceptProposedAction()
        return True
