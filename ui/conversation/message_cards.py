"""How one message is drawn: a card (the assistant's) or a bubble (yours), measured once.

A message's Markdown becomes a QTextDocument the first time it is drawn and is
kept (DOCUMENTS_KEPT most recent), so scrolling draws kept documents and a
streaming reply re-lays-out only itself. A row not drawn yet can be given an
estimated height from its text alone, so opening a conversation of thousands
of messages lays out only what is visible (ui.conversation.chat_view keeps the heights).

Geometry is one method (`layout`) used for drawing and for hit-testing, so
what is clicked is what is drawn: links in the text, thumbnails and the
Copy / Edit / Delete actions under each message.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from PySide6.QtCore import QPointF, QRect, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter, QTextDocument

from app.screen_text.units import speed_text
from ui.conversation.conversation_model import MessageRow
from ui.conversation.message_html import MessageColours, RenderedMessage, render_message
from ui.theme import Theme

DOCUMENTS_KEPT = 300
MARGIN_X, MARGIN_Y, PADDING, RADIUS = 16, 6, 12, 12
USER_SHARE = 0.78  # a user bubble is at most this share of the width, right-aligned
THUMB_PX, THUMB_GAP = 96, 8
ACTIONS = ("Copy", "Edit", "Delete")


@dataclass
class _Rendered:
    document: QTextDocument
    codes: tuple[str, ...]


@dataclass
class RowLayout:
    """Where each part of one row is drawn, relative to the row's rectangle."""

    bubble: QRect
    header: QRect
    thumbs: list[QRect] = field(default_factory=list)
    text_origin: QPointF = field(default_factory=QPointF)
    text_width: float = 0.0
    footer: QRect = field(default_factory=QRect)
    actions: dict[str, QRect] = field(default_factory=dict)


class MessageCards:
    """Renders, measures and draws message cards; keeps each rendering while it is shown."""

    def __init__(self, colours: Theme) -> None:
        self.colours = colours
        self.thumbnail: Callable[[MessageRow, int], QImage | None] = lambda _row, _i: None
        self._documents: OrderedDict[tuple, _Rendered] = OrderedDict()
        self._unfolded: set[int | None] = set()  # rows whose thinking is shown whole, by id
        self._hover: tuple[int, str] | None = None  # (row, action) under the mouse
        self._font = QFont()
        self._small = QFont()
        self._small.setPointSizeF(max(7.0, self._font.pointSizeF() * 0.85))
        self._bold = QFont()
        self._bold.setBold(True)
        self._line = QFontMetrics(self._font)
        self._char_px = max(1, self._line.averageCharWidth())
        self._spacing = self._line.lineSpacing()
        self._fixed: dict[bool, int] = {}  # _fixed_height by "has images"

    def set_colours(self, colours: Theme) -> None:
        """A new theme: every kept rendering is redone when next drawn."""
        self.colours = colours
        self._documents.clear()

    def set_hover(self, hover: tuple[int, str] | None) -> None:
        self._hover = hover

    def toggle_thinking(self, row: MessageRow) -> None:
        self._unfolded.symmetric_difference_update({row.message_id})

    def forget(self, row: MessageRow) -> None:
        """Drop a row's renderings (its text changed, or it is gone)."""
        for key in [k for k in self._documents if k[0] == row.message_id]:
            del self._documents[key]

    def document(self, row: MessageRow, width: int) -> QTextDocument:
        """Row's rendered text at a view width (made now if it is not kept)."""
        return self._rendered(row, self._text_width(row, width)).document

    def codes(self, row: MessageRow, width: int) -> tuple[str, ...]:
        return self._rendered(row, self._text_width(row, width)).codes

    def height(self, row: MessageRow, width: int) -> int:
        """The row's exact height at this width (lays its text out, once per version)."""
        document = self.document(row, width)
        return self._fixed_height(row) + math.ceil(document.size().height())

    def estimate(self, row: MessageRow, width: int) -> int:
        """About how tall the row will be, from its text alone (no layout): O(1) per line."""
        per_line = max(10, int(self._text_width(row, width) / self._char_px))
        text = row.text
        lines = text.count("\n") + 1 + len(text) // per_line
        fences = text.count("```") // 2
        spacing = self._spacing
        return self._fixed_height(row) + int(lines * spacing * 1.2) + fences * 3 * spacing

    def paint(self, painter: QPainter, index: int, row: MessageRow, rect: QRect) -> None:
        layout = self.layout(row, rect)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        self._paint_bubble(painter, row, layout)
        self._paint_header(painter, row, layout)
        self._paint_thumbs(painter, row, layout)
        rendered = self._rendered(row, layout.text_width)
        painter.translate(layout.text_origin)
        rendered.document.drawContents(painter)
        painter.translate(-layout.text_origin)
        self._paint_footer(painter, index, row, layout)
        painter.restore()

    def layout(self, row: MessageRow, rect: QRect) -> RowLayout:
        """The parts of a row drawn in `rect` (the row's rectangle in the view)."""
        width = rect.width()
        text_width = self._text_width(row, width)
        document = self._rendered(row, text_width).document
        if row.role == "user":
            inner = max(min(document.idealWidth(), text_width), self._min_inner(row))
            bubble_width = math.ceil(inner) + 2 * PADDING
            left = rect.right() - MARGIN_X - bubble_width + 1
        else:
            bubble_width = width - 2 * MARGIN_X
            left = rect.left() + MARGIN_X
        top = rect.top() + MARGIN_Y
        bubble = QRect(left, top, bubble_width, rect.height() - 2 * MARGIN_Y)
        line = QFontMetrics(self._bold).height()
        header = QRect(left + PADDING, top + PADDING, bubble_width - 2 * PADDING, line)
        y = header.bottom() + 4
        thumbs = []
        for i in range(len(row.image_names)):
            thumbs.append(QRect(left + PADDING + i * (THUMB_PX + THUMB_GAP), y, THUMB_PX, THUMB_PX))
        if thumbs:
            y += THUMB_PX + THUMB_GAP
        origin = QPointF(left + PADDING - 4, y)  # a document's own margin is 4 px
        footer_height = QFontMetrics(self._small).height()
        footer = QRect(
            left + PADDING, bubble.bottom() - PADDING - footer_height + 1,
            bubble_width - 2 * PADDING, footer_height,
        )  # fmt: skip
        return RowLayout(
            bubble, header, thumbs, origin, text_width, footer, self._action_rects(footer)
        )

    # -- measuring -----------------------------------------------------------------------

    def _text_width(self, row: MessageRow, width: int) -> float:
        full = width - 2 * MARGIN_X - 2 * PADDING + 8
        return max(80.0, full * USER_SHARE if row.role == "user" else full)

    def _min_inner(self, row: MessageRow) -> float:
        header = QFontMetrics(self._bold).horizontalAdvance(row.speaker)
        actions = sum(r.width() + 10 for r in self._action_rects(QRect(0, 0, 400, 10)).values())
        thumbs = len(row.image_names) * (THUMB_PX + THUMB_GAP)
        return float(max(header, actions, thumbs, 120))

    def _fixed_height(self, row: MessageRow) -> int:
        """Everything but the text: margins, padding, the name, thumbnails, the actions."""
        images = bool(row.image_names)
        if images not in self._fixed:
            line = QFontMetrics(self._bold).height()
            footer = QFontMetrics(self._small).height()
            thumbs = THUMB_PX + THUMB_GAP if images else 0
            self._fixed[images] = 2 * MARGIN_Y + 2 * PADDING + line + 4 + thumbs + footer + 6
        return self._fixed[images]

    def _document_key(self, row: MessageRow, text_width: float) -> tuple:
        return (row.message_id, row.version, round(text_width), row.message_id in self._unfolded)

    def _rendered(self, row: MessageRow, text_width: float) -> _Rendered:
        key = self._document_key(row, text_width)
        if key in self._documents:
            self._documents.move_to_end(key)
            return self._documents[key]
        rendered = self._render(row)
        document = QTextDocument()
        document.setDefaultFont(self._font)
        document.setHtml(rendered.html)
        document.setTextWidth(text_width)
        self._documents[key] = _Rendered(document, rendered.codes)
        while len(self._documents) > DOCUMENTS_KEPT:
            self._documents.popitem(last=False)
        return self._documents[key]

    def _render(self, row: MessageRow) -> RenderedMessage:
        colours: MessageColours = self.colours
        return render_message(
            row.text, colours, row.thinking, row.message_id in self._unfolded, row.streaming
        )

    # -- drawing ----------------------------------------------------------------------------

    def _paint_bubble(self, painter: QPainter, row: MessageRow, layout: RowLayout) -> None:
        fill = self.colours.surface_alt if row.role == "user" else self.colours.surface
        painter.setPen(QColor(self.colours.border))
        painter.setBrush(QColor(fill))
        painter.drawRoundedRect(
            QRectF(layout.bubble).adjusted(0.5, 0.5, -0.5, -0.5), RADIUS, RADIUS
        )

    def _paint_header(self, painter: QPainter, row: MessageRow, layout: RowLayout) -> None:
        painter.setFont(self._bold)
        painter.setPen(QColor(self.colours.text))
        painter.drawText(layout.header, Qt.AlignmentFlag.AlignLeft, row.speaker)

    def _paint_thumbs(self, painter: QPainter, row: MessageRow, layout: RowLayout) -> None:
        for i, rect in enumerate(layout.thumbs):
            image = self.thumbnail(row, i)
            painter.setPen(QColor(self.colours.border))
            painter.setBrush(QColor(self.colours.code_background))
            painter.drawRoundedRect(QRectF(rect), 6, 6)
            if image is not None and not image.isNull():
                scaled = image.size().scaled(rect.size(), Qt.AspectRatioMode.KeepAspectRatio)
                target = QRect(rect.topLeft(), scaled)
                target.moveCenter(rect.center())
                painter.drawImage(target, image)

    def _paint_footer(
        self, painter: QPainter, index: int, row: MessageRow, layout: RowLayout
    ) -> None:
        painter.setFont(self._small)
        painter.setPen(QColor(self.colours.muted_text))
        painter.drawText(layout.footer, Qt.AlignmentFlag.AlignLeft, _stats_line(row))
        if row.streaming:
            return
        for name, rect in layout.actions.items():
            hovered = self._hover == (index, name)
            painter.setPen(QColor(self.colours.accent if hovered else self.colours.muted_text))
            painter.drawText(rect, Qt.AlignmentFlag.AlignRight, name)

    def _action_rects(self, footer: QRect) -> dict[str, QRect]:
        metrics = QFontMetrics(self._small)
        rects: dict[str, QRect] = {}
        right = footer.right()
        for name in reversed(ACTIONS):
            width = metrics.horizontalAdvance(name) + 4
            rects[name] = QRect(right - width + 1, footer.top(), width, footer.height())
            right -= width + 12
        return {name: rects[name] for name in ACTIONS}


def _stats_line(row: MessageRow) -> str:
    """Under a finished reply: how fast it came, as the speed line says it."""
    stats = row.stats or {}
    speed = stats.get("decode_tokens_per_s")
    if row.role != "assistant" or not isinstance(speed, (int, float)):
        return ""
    tokens = stats.get("generated_tokens")
    count = f"{tokens} tokens · " if isinstance(tokens, int) else ""
    return f"{count}{speed_text(speed, 'tokens/s')}"
