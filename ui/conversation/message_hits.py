"""What is under a point of a drawn message: one of its actions, a thumbnail, or a link in
its text. Resolved through the cards' own geometry, so a click lands where the eye sees it."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, QRect

from ui.conversation.conversation_model import MessageRow
from ui.conversation.message_cards import MessageCards

Hit = tuple[str, object]  # ("action", name) | ("image", index) | ("link", href)


def hit_in_card(
    cards: MessageCards, row: MessageRow, rect: QRect, pos: QPoint, width: int
) -> Hit | None:
    """`rect` is the row's rectangle in the view, `width` the width its text was laid out at."""
    layout = cards.layout(row, rect)
    if not layout.bubble.contains(pos):
        return None
    for name, action in layout.actions.items():
        if action.adjusted(-4, -4, 4, 4).contains(pos) and not row.streaming:
            return "action", name
    for i, thumb in enumerate(layout.thumbs):
        if thumb.contains(pos):
            return "image", i
    document = cards.document(row, width)
    href = document.documentLayout().anchorAt(QPointF(pos) - layout.text_origin)
    return ("link", href) if href else None
