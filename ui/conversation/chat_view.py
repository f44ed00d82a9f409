"""The conversation: a scrolling list of message cards that only draws what is on screen.

It renders a `ConversationModel` and owns nothing else: the controller fills the
model, and while a reply streams it passes the growing text, which updates only
the last row at most every RENDER_INTERVAL_MS. Finished messages are rendered
once and kept (ui.conversation.message_cards), so a reply streaming into a conversation of a
thousand messages costs what it costs into an empty one. Images are read from
the chat store when their row is first drawn (decoded off the GUI thread), not
when the conversation opens.

Heights are kept per row (exact once drawn, an estimate from the text before)
with their running sums, so finding what is on screen is a bisection, and a row
that grows changes the sums, not a layout of every message. Rows that get their
exact height above what was on screen move the scroll position by as much, so
the text in view does not jump. Clicks are resolved through the cards' own
geometry: links in the text (copy a code block, fold a reasoning model's
thinking, web links to the browser), thumbnails, and each message's
Copy / Edit / Delete. While the view is scrolled up, "Jump to latest" brings the
newest message back and new text no longer pulls the view down. A long conversation
comes a page at a time: scrolled near the top of what it holds, the view asks for the
page before (older_wanted) and keeps the text in view where it was when it comes.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

from PySide6.QtCore import QEvent, QPoint, QRect, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QContextMenuEvent,
    QDesktopServices,
    QGuiApplication,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QResizeEvent,
)
from PySide6.QtWidgets import QAbstractScrollArea, QFrame, QMenu, QToolButton

from ui.conversation.conversation_model import ConversationModel, MessageRow
from ui.conversation.empty_state import paint_empty_state
from ui.conversation.message_cards import MessageCards
from ui.conversation.message_hits import hit_in_card
from ui.conversation.message_html import COPY_SCHEME, THINK_SCHEME
from ui.conversation.thumbnails import ImageSource, Thumbnails
from ui.theme import LIGHT, Theme

RENDER_INTERVAL_MS = 50
BOTTOM_SLACK_PX = 8
WARM_SCREENS = 3  # how far above and below the screen rows are laid out ahead, when idle


class ChatView(QAbstractScrollArea):
    code_copied = Signal(str)  # the code put on the clipboard
    message_copied = Signal(str)  # a whole message put on the clipboard
    image_opened = Signal(object)  # the ImageFile whose thumbnail was clicked
    edit_requested = Signal(int)  # the row whose Edit was clicked
    delete_requested = Signal(int)  # the row whose Delete was clicked
    older_wanted = Signal()  # scrolled near the top of a conversation with older messages

    def __init__(self, theme: Theme = LIGHT) -> None:
        super().__init__()
        self.setAccessibleName("Conversation")
        self.conversation = ConversationModel()
        self.cards = MessageCards(theme)
        self.thumbnails = Thumbnails(self.viewport().update, parent=self)
        self.cards.thumbnail = lambda row, index: self.thumbnails.get(row.message_id, index)
        self.images_read = self.thumbnails.images_read  # what was fetched from the store
        self._heights: list[int] = []  # per row: exact once drawn, else estimated
        self._exact: list[bool] = []
        self._tops: list[int] = [0]  # running sums of _heights: row i spans tops[i]..tops[i+1]
        self._width = 0  # the width the heights were measured at
        self._first_shown = 0  # the first row drawn last time (rows above it anchor the view)
        self._empty: tuple[str, list[str]] = ("", [])
        self._pending: tuple[str, str] | None = None  # the streaming text not drawn yet
        self._timer = QTimer(self, singleShot=True, interval=RENDER_INTERVAL_MS)
        self._timer.timeout.connect(self._draw_streaming)
        self._follow = True  # at the bottom: new text keeps the newest line in view
        self._more_above = False  # the conversation has older messages than the first row
        self._asked_older = False  # older_wanted was emitted and not answered yet
        self._warm_timer = QTimer(self, interval=0)  # measures rows near the screen when idle
        self._warm_timer.timeout.connect(self._warm_one)
        self.jump_button = QToolButton(self.viewport())
        self.jump_button.setText("↓ Jump to latest")
        self.jump_button.setAccessibleName("Jump to latest")
        self.jump_button.clicked.connect(self.jump_to_latest)
        self.jump_button.hide()
        self._configure()

    def _configure(self) -> None:
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.viewport().setMouseTracking(True)
        self.viewport().setAutoFillBackground(False)
        bar = self.verticalScrollBar()
        bar.setSingleStep(40)
        bar.valueChanged.connect(self._on_scrolled)

    # -- what the controller says ------------------------------------------------------------

    def use_theme(self, theme: Theme) -> None:
        """The app's theme changed: every card is drawn again in its colours."""
        self.cards.set_colours(theme)
        self._remeasure()
        self._settle()

    def set_image_source(self, source: ImageSource | None) -> None:
        """Where a row's images are read from when it is first drawn (the chat store)."""
        self.thumbnails.set_source(source)

    def set_empty_state(self, title: str, lines: Sequence[str] = ()) -> None:
        """What the view says while it has no messages (first chat, or no model)."""
        self._empty = (title, list(lines))
        self.viewport().update()

    def show_messages(self, rows: Sequence[MessageRow], more_above: bool = False) -> None:
        """A conversation opened: its messages replace what is shown, newest in view.
        `more_above`: older ones exist; scrolling near the top asks for them (older_wanted)."""
        self._pending = None
        self._timer.stop()
        for row in self.conversation.rows():
            self.cards.forget(row)
        self.conversation.set_rows(rows)
        self._more_above, self._asked_older = more_above, False
        self._remeasure()
        self._follow = True
        self._settle()

    def prepend_messages(self, rows: Sequence[MessageRow], more_above: bool) -> None:
        """Older messages go above the first; the text in view stays where it is."""
        self._more_above, self._asked_older = more_above, False
        if not rows:
            return
        heights = [self.cards.estimate(row, self._width) for row in rows]
        self.conversation.prepend(rows)
        self._heights[0:0] = heights
        self._exact[0:0] = [False] * len(rows)
        self._first_shown += len(rows)
        bar = self.verticalScrollBar()
        value = bar.value()
        self._resum()
        bar.blockSignals(True)
        bar.setValue(value + sum(heights))
        bar.blockSignals(False)
        self._settle()

    def add_message(self, row: MessageRow) -> None:
        self.conversation.append(row)
        self._heights.append(self.cards.estimate(row, self._width))
        self._exact.append(False)
        self._resum()
        self._settle()

    def show_streaming(self, text: str, thinking: str = "") -> None:
        """The reply as it grows (the last row, which must be streaming)."""
        self._pending = (text, thinking)
        if not self._timer.isActive():
            self._timer.start()

    def finish_streaming(self, row: MessageRow) -> None:
        """The reply ended: the last row becomes this finished message."""
        self._pending = None
        self._timer.stop()
        last = self.conversation.rowCount() - 1
        if last >= 0 and self.conversation.row(last).streaming:
            self._replace(last, row)

    def replace_message(self, index: int, row: MessageRow) -> None:
        self._replace(index, row)

    def remove_messages(self, index: int, count: int = 1) -> None:
        for row in self.conversation.rows()[index : index + count]:
            self.cards.forget(row)
        self.conversation.remove(index, count)
        del self._heights[index : index + count]
        del self._exact[index : index + count]
        self._resum()
        self._settle()

    def shown_text(self) -> str:
        """Everything shown, as plain text, rendered as it is drawn (for tests and screen
        readers)."""
        parts = []
        for row in self.conversation.rows():
            document = self.cards.document(row, self._measure_width())
            parts.append(f"{row.speaker}\n{document.toPlainText()}")
        return "\n\n".join(parts)

    def code_blocks(self, index: int) -> tuple[str, ...]:
        """The code of each closed block of row `index` (what its copy links copy)."""
        return self.cards.codes(self.conversation.row(index), self._measure_width())

    def copy_code(self, index: int, block: int) -> None:
        code = self.code_blocks(index)[block]
        QGuiApplication.clipboard().setText(code)
        self.code_copied.emit(code)

    def copy_message(self, index: int) -> None:
        text = self.conversation.row(index).text
        QGuiApplication.clipboard().setText(text)
        self.message_copied.emit(text)

    def toggle_thinking(self, index: int) -> None:
        row = self.conversation.row(index)
        self.cards.forget(row)
        self.cards.toggle_thinking(row)
        self._exact[index] = False
        self._measure(index)
        self._resum()
        self._settle()

    def open_image(self, index: int, image: int) -> None:
        message_id = self.conversation.row(index).message_id
        opened = self.thumbnails.image(message_id, image) if message_id is not None else None
        if opened is not None:
            self.image_opened.emit(opened)

    def jump_to_latest(self) -> None:
        self._follow = True
        self._settle()

    def is_following(self) -> bool:
        return self._follow

    def row_rect(self, index: int) -> QRect:
        """Where row `index` is on screen now (it may be off it)."""
        top = self._tops[index] - self.verticalScrollBar().value()
        return QRect(0, top, self.viewport().width(), self._heights[index])

    def scroll_to_row(self, index: int) -> None:
        self._follow = False
        self.verticalScrollBar().setValue(self._tops[index])

    def shutdown(self) -> None:
        self.thumbnails.shutdown()

    # -- heights and scrolling -----------------------------------------------------------------

    def _measure_width(self) -> int:
        return max(240, self.viewport().width())

    def _remeasure(self) -> None:
        """New rows or a new width: every height is an estimate until its row is drawn."""
        self._width = self._measure_width()
        rows = self.conversation.rows()
        self._heights = [self.cards.estimate(row, self._width) for row in rows]
        self._exact = [False] * len(rows)
        self._first_shown = 0
        self._resum()

    def _measure(self, index: int) -> int:
        """Make row `index`'s height exact; returns by how much it changed."""
        if self._exact[index]:
            return 0
        exact = self.cards.height(self.conversation.row(index), self._width)
        change = exact - self._heights[index]
        self._heights[index], self._exact[index] = exact, True
        return change

    def _resum(self) -> None:
        self._tops = [0, *accumulate(self._heights)]
        bar = self.verticalScrollBar()
        bar.setRange(0, max(0, self._tops[-1] - self.viewport().height()))
        bar.setPageStep(self.viewport().height())

    def _settle(self) -> None:
        """Make what will be on screen exact, keep the text in view still, then draw."""
        if self._width != self._measure_width():
            self._remeasure()
        bar, height = self.verticalScrollBar(), self.viewport().height()
        count = len(self._heights)
        if self._follow:
            covered, index = 0, count - 1
            while index >= 0 and covered < height + 200:
                self._measure(index)
                covered += self._heights[index]
                index -= 1
            self._resum()
            bar.blockSignals(True)
            bar.setValue(bar.maximum())
            bar.blockSignals(False)
        else:
            first = self._row_at(bar.value())
            anchor = self._first_shown  # the first row drawn last time, if still in view
            kept = first <= anchor and self._tops[anchor] < bar.value() + height
            shift = 0
            index = first
            while index < count and self._tops[index] < bar.value() + height + 200:
                change = self._measure(index)
                if kept and index < anchor:
                    shift += change  # it was above what was shown: keep that in place
                self._tops[index + 1] = self._tops[index] + self._heights[index]
                index += 1
            self._resum()
            if shift:
                bar.blockSignals(True)
                bar.setValue(bar.value() + shift)
                bar.blockSignals(False)
        self._first_shown = self._row_at(bar.value())
        if self._more_above and not self._asked_older and bar.value() < 2 * height:
            self._asked_older = True  # answered by prepend_messages, after this settles
            QTimer.singleShot(0, self.older_wanted.emit)
        self._show_jump_button()
        self.viewport().update()
        if not self._warm_timer.isActive():
            self._warm_timer.start()

    def _warm_one(self) -> None:
        """While the app is idle, lay out one row near the screen (the next screens down,
        then up), so scrolling there draws kept renderings; rows above the screen move the
        scroll position by their change, as in _settle."""
        index = self._row_to_warm()
        if index is None:
            self._warm_timer.stop()
            return
        change = self._measure(index)
        self._resum()
        bar = self.verticalScrollBar()
        if change and index < self._first_shown and not self._follow:
            bar.blockSignals(True)
            bar.setValue(bar.value() + change)
            bar.blockSignals(False)
        elif self._follow:
            bar.blockSignals(True)
            bar.setValue(bar.maximum())
            bar.blockSignals(False)

    def _row_to_warm(self) -> int | None:
        if not self._heights:
            return None
        value, height = self.verticalScrollBar().value(), self.viewport().height()
        first, last = self._row_at(value), self._row_at(value + height)
        below = range(last + 1, self._row_at(value + WARM_SCREENS * height) + 1)
        above = range(first - 1, self._row_at(max(0, value - WARM_SCREENS * height)) - 1, -1)
        return next((i for i in (*below, *above) if not self._exact[i]), None)

    def _row_at(self, y: int) -> int:
        """The row at content height `y` (the last row past the end)."""
        return max(0, min(len(self._heights) - 1, bisect_right(self._tops, y) - 1))

    def _on_scrolled(self, value: int) -> None:
        self._follow = value >= self.verticalScrollBar().maximum() - BOTTOM_SLACK_PX
        self._settle()

    def _show_jump_button(self) -> None:
        self.jump_button.setVisible(not self._follow and bool(self._heights))
        hint = self.jump_button.sizeHint()
        area = self.viewport().rect()
        self.jump_button.move(area.right() - hint.width() - 16, area.bottom() - hint.height() - 12)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if self._width != self._measure_width():
            self._remeasure()
        self._resum()
        self._settle()

    def scrollContentsBy(self, _dx: int, _dy: int) -> None:  # noqa: N802 - Qt's name
        self.viewport().update()

    def _draw_streaming(self) -> None:
        last = self.conversation.rowCount() - 1
        if self._pending is None or last < 0 or not self.conversation.row(last).streaming:
            return
        text, thinking = self._pending
        self._pending = None
        old = self.conversation.row(last)
        self._replace(last, MessageRow(old.message_id, old.role, text, thinking, streaming=True))

    def _replace(self, index: int, row: MessageRow) -> None:
        self.cards.forget(self.conversation.row(index))
        self.conversation.replace_row(
            index, message_id=row.message_id, role=row.role, text=row.text,
            thinking=row.thinking, image_names=row.image_names, stats=row.stats,
            streaming=row.streaming,
        )  # fmt: skip
        self._exact[index] = False
        self._measure(index)
        self._resum()
        self._settle()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt's name
        painter = QPainter(self.viewport())
        painter.fillRect(event.rect(), self.palette().base())
        if not self._heights:
            self._paint_empty(painter)
            painter.end()
            return
        value, height = self.verticalScrollBar().value(), self.viewport().height()
        index = self._row_at(value)
        if not all(self._exact[index : self._row_at(value + height) + 1]):
            self._settle()  # a row on screen still has its estimate: measure before drawing
            value = self.verticalScrollBar().value()
            index = self._row_at(value)
        while index < len(self._heights) and self._tops[index] < value + height:
            row = self.conversation.row(index)
            self.cards.paint(painter, index, row, self.row_rect(index))
            index += 1
        painter.end()

    def thumbnails_shown(self) -> list[tuple[int, int]]:
        """(message id, image index) of the thumbnails decoded so far."""
        return self.thumbnails.shown()

    # -- the mouse -------------------------------------------------------------------------------

    def _hit(self, pos: QPoint) -> tuple[int, str, object] | None:
        """What is under `pos`: (row, "link", href) | (row, "action", name) | (row, "image", i)."""
        if not self._heights:
            return None
        index = self._row_at(self.verticalScrollBar().value() + pos.y())
        row, rect = self.conversation.row(index), self.row_rect(index)
        hit = hit_in_card(self.cards, row, rect, pos, self._width)
        return (index, *hit) if hit else None

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt's name
        hit = self._hit(event.position().toPoint())
        hover = (hit[0], str(hit[2])) if hit and hit[1] == "action" else None
        self.cards.set_hover(hover)
        pointing = Qt.CursorShape.PointingHandCursor
        self.viewport().setCursor(pointing if hit else Qt.CursorShape.ArrowCursor)
        self.viewport().update()
        super().mouseMoveEvent(event)

    def leaveEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt's name
        self.cards.set_hover(None)
        self.viewport().update()
        super().leaveEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt's name
        if event.button() == Qt.MouseButton.LeftButton:
            hit = self._hit(event.position().toPoint())
            if hit is not None:
                self.activate(*hit)
        super().mouseReleaseEvent(event)

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802 - Qt's name
        """Right click (or the menu key) on a message: the same actions, and copying it as
        Markdown, for the keyboard and for people who look there first."""
        menu = self.message_menu(self._row_at(self.verticalScrollBar().value() + event.y()))
        if menu is not None:
            menu.exec(event.globalPos())

    def message_menu(self, index: int) -> QMenu | None:
        if not self._heights or self.conversation.row(index).streaming:
            return None
        menu = QMenu(self)
        row = self.conversation.row(index)
        menu.addAction("Copy", lambda: self.copy_message(index))
        menu.addAction("Copy as Markdown", lambda: self._copy_markdown(row))
        menu.addSeparator()
        menu.addAction("Edit", lambda: self.edit_requested.emit(index))
        menu.addAction("Delete", lambda: self.delete_requested.emit(index))
        return menu

    def _copy_markdown(self, row: MessageRow) -> None:
        QGuiApplication.clipboard().setText(row.as_markdown())
        self.message_copied.emit(row.as_markdown())

    def activate(self, index: int, kind: str, what: object) -> None:
        """Do what a click on part `kind` of row `index` does."""
        if kind == "action":
            {"Copy": self.copy_message, "Edit": self.edit_requested.emit,
             "Delete": self.delete_requested.emit}[str(what)](index)  # fmt: skip
        elif kind == "image" and isinstance(what, int):
            self.open_image(index, what)
        elif kind == "link":
            self._follow_link(index, QUrl(str(what)))

    def _follow_link(self, index: int, url: QUrl) -> None:
        if url.scheme() == COPY_SCHEME and url.path().isdigit():
            block = int(url.path())
            if block < len(self.code_blocks(index)):
                self.copy_code(index, block)
        elif url.scheme() == THINK_SCHEME:
            self.toggle_thinking(index)
        elif url.scheme() in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)

    # -- the empty state ------------------------------------------------------------------------

    def _paint_empty(self, painter: QPainter) -> None:
        title, lines = self._empty
        if title:
            area = self.viewport().rect().adjusted(40, 0, -40, 0)
            paint_empty_state(painter, area, self.font(), self.cards.colours, title, lines)

    def empty_state(self) -> tuple[str, list[str]]:
        return self._empty[0], list(self._empty[1])
