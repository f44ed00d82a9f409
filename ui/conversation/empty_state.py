"""What the conversation says while it has no messages: a title and a few muted lines,
centred (a first chat's suggestions, or how to get a model)."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QFont, QPainter

from ui.theme import Theme

LINE_PX = 26


def paint_empty_state(
    painter: QPainter, area: QRect, font: QFont, colours: Theme, title: str, lines: Sequence[str]
) -> None:
    big = QFont(font)
    big.setPointSizeF(font.pointSizeF() * 1.6)
    big.setBold(True)
    painter.setFont(big)
    painter.setPen(QColor(colours.text))
    top = area.center().y() - LINE_PX * (2 + len(lines)) // 2
    centre = Qt.AlignmentFlag.AlignCenter
    painter.drawText(QRect(area.left(), top, area.width(), 40), centre, title)
    painter.setFont(font)
    painter.setPen(QColor(colours.muted_text))
    for i, line in enumerate(lines):
        row = QRect(area.left(), top + 48 + i * LINE_PX, area.width(), 24)
        painter.drawText(row, centre, line)
