"""An image from the conversation, shown whole in a window of its own (a clicked thumbnail)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QPixmap
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QScrollArea, QVBoxLayout, QWidget

from engine.model.image_input import ImageFile

SCREEN_SHARE = 0.8  # the window opens at most this much of the screen; larger images scroll


class ImageViewer(QDialog):
    def __init__(self, image: ImageFile, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        pixmap = QPixmap()
        pixmap.loadFromData(image.data)
        self.setWindowTitle(f"{image.name} — {pixmap.width()}×{pixmap.height()} px")
        self.picture = QLabel()
        self.picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.picture.setAccessibleName(f"Image {image.name}")
        if pixmap.isNull():
            self.picture.setText(f"{image.name} cannot be shown (the saved data is damaged)")
        else:
            self.picture.setPixmap(pixmap)
        scroll = QScrollArea()
        scroll.setWidget(self.picture)
        scroll.setWidgetResizable(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(scroll)
        layout.addWidget(buttons)
        self._fit(pixmap)

    def _fit(self, pixmap: QPixmap) -> None:
        screen = QGuiApplication.primaryScreen()
        room = screen.availableGeometry().size() * SCREEN_SHARE if screen else None
        width, height = pixmap.width() + 40, pixmap.height() + 80
        if room is not None:
            width, height = min(width, room.width()), min(height, room.height())
        self.resize(max(width, 240), max(height, 160))
