"""The chat view: message cards rendered once, a streaming reply, links, images, scrolling."""

from __future__ import annotations

from PySide6.QtCore import QBuffer, QIODevice, QPoint, Qt
from PySide6.QtGui import QGuiApplication, QImage

from engine.model.image_input import ImageFile
from ui.conversation.chat_view import ChatView
from ui.conversation.conversation_model import MessageRow
from ui.conversation.message_html import render_message

REPLY = "Here:\n\n```python\nprint('hi')\n```\n\nand\n\n- step\n  ~~~\n  make test\n  ~~~\n"
TABLE = "| a | b |\n|---|---|\n| 1 | 2 |\n"
THOUGHT = "The user greets me.\nI greet back."


def make_view(qtbot, rows: list[MessageRow] = ()) -> ChatView:  # type: ignore[assignment]
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(800, 600)
    view.show()
    view.show_messages(rows)
    return view


def exchanges(count: int) -> list[MessageRow]:
    rows = []
    for i in range(count):
        rows.append(MessageRow(2 * i + 1, "user", f"Question {i}?"))
        rows.append(MessageRow(2 * i + 2, "assistant", f"Answer {i}:\n\n{TABLE}\n{REPLY}"))
    return rows


def test_closed_code_blocks_get_a_copy_link_with_their_code_and_colours(qtbot) -> None:
    rendered = render_message(REPLY, ChatView().cards.colours)
    assert rendered.codes == ("print('hi')\n", "make test\n")
    assert rendered.html.count('href="copy:') == 2
    assert "<span style=" in rendered.html  # Pygments coloured the Python
    open_block = render_message("Look:\n\n```sh\nls -l\n", ChatView().cards.colours)
    assert open_block.codes == () and "copy:" not in open_block.html  # still streaming


def test_markdown_tables_render_and_raw_html_stays_text(qtbot) -> None:
    view = make_view(qtbot, [MessageRow(1, "assistant", TABLE + "\n<b>not bold</b>")])
    document = view.cards.document(view.conversation.row(0), 800)
    assert document.toHtml().count("<td") >= 4
    assert "<b>not bold</b>" in view.shown_text()


def test_clicking_a_copy_link_puts_that_block_on_the_clipboard(qtbot) -> None:
    view = make_view(
        qtbot, [MessageRow(1, "user", "code please"), MessageRow(2, "assistant", REPLY)]
    )
    assert view.code_blocks(1) == ("print('hi')\n", "make test\n")
    with qtbot.waitSignal(view.code_copied) as copied:
        view.activate(1, "link", "copy:1")
    assert copied.args == ["make test\n"] and QGuiApplication.clipboard().text() == "make test\n"
    QGuiApplication.clipboard().setText("kept")
    view.activate(1, "link", "copy:7")  # a block that is not there does nothing
    assert QGuiApplication.clipboard().text() == "kept"


def test_a_real_click_on_a_copy_action_copies_the_message(qtbot) -> None:
    view = make_view(qtbot, [MessageRow(1, "assistant", "Copy me, please.")])
    layout = view.cards.layout(view.conversation.row(0), view.row_rect(0))
    with qtbot.waitSignal(view.message_copied) as copied:
        qtbot.mouseClick(
            view.viewport(), Qt.MouseButton.LeftButton, pos=layout.actions["Copy"].center()
        )
    assert copied.args == ["Copy me, please."]
    with qtbot.waitSignal(view.delete_requested) as deleted:
        qtbot.mouseClick(
            view.viewport(), Qt.MouseButton.LeftButton, pos=layout.actions["Delete"].center()
        )
    assert deleted.args == [0]


def test_streaming_updates_only_the_last_row(qtbot) -> None:
    rows = exchanges(50)
    view = make_view(qtbot, rows)
    before = [view.conversation.row(i).version for i in range(len(rows))]
    view.add_message(MessageRow(500, "assistant", "", streaming=True))
    for text in ("Once", "Once upon", "Once upon a time"):
        view.show_streaming(text)
        qtbot.waitUntil(lambda t=text: view.conversation.row(len(rows)).text == t)
    assert [view.conversation.row(i).version for i in range(len(rows))] == before
    view.finish_streaming(
        MessageRow(500, "assistant", "Once upon a time.", stats={"decode_tokens_per_s": 9.5})
    )
    last = view.conversation.row(len(rows))
    assert not last.streaming and last.text == "Once upon a time."
    assert view.is_following()  # the newest line stays in view


def test_a_long_conversation_lays_out_only_what_is_visible(qtbot) -> None:
    view = make_view(qtbot, exchanges(500))
    qtbot.waitExposed(view)
    view.viewport().repaint()
    exact = sum(view._exact)
    assert 0 < exact < 40  # a screenful (and a margin), not a thousand messages
    assert view.verticalScrollBar().value() == view.verticalScrollBar().maximum()


def test_scrolled_up_new_text_does_not_pull_the_view_down_until_jump(qtbot) -> None:
    view = make_view(qtbot, exchanges(40))
    view.add_message(MessageRow(900, "assistant", "", streaming=True))
    view.scroll_to_row(3)
    shown = view.row_rect(3).top()
    assert view.jump_button.isVisible()
    view.show_streaming("more\n\n" * 30)
    qtbot.waitUntil(lambda: view.conversation.row(80).text.startswith("more"))
    qtbot.waitUntil(lambda: not view._warm_timer.isActive())  # rows near it laid out
    assert view.row_rect(3).top() == shown  # the row read stays where it was
    view.jump_button.click()
    bar = view.verticalScrollBar()
    assert bar.value() == bar.maximum() and not view.jump_button.isVisible()


def test_rows_measured_above_the_view_keep_the_text_in_view_still(qtbot) -> None:
    view = make_view(qtbot, exchanges(200))
    bar = view.verticalScrollBar()
    bar.setValue(bar.maximum() // 2)
    view.viewport().repaint()
    anchor = view._row_at(bar.value() + 10)
    top = view.row_rect(anchor).top()
    for _ in range(10):  # scroll up a screen at a time, then come back as far
        bar.setValue(bar.value() - 600)
    for _ in range(10):
        bar.setValue(bar.value() + 600)
    assert abs(view.row_rect(anchor).top() - top) <= 600  # no runaway jump from estimates


def png(width: int, height: int) -> bytes:
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image = QImage(width, height, QImage.Format.Format_RGB32)
    image.fill(0x3366CC)
    image.save(buffer, "PNG")
    return bytes(buffer.data())


def test_images_are_read_when_their_row_is_drawn_and_a_click_opens_one(qtbot) -> None:
    photo = ImageFile("photo.png", png(400, 200))
    rows = [MessageRow(1, "user", "Look", image_names=("photo.png",))] + exchanges(100)[1:]
    rows.append(MessageRow(999, "user", "And this", image_names=("photo.png",)))
    reads: list[tuple[int, int]] = []

    def read(message_id: int, index: int) -> ImageFile:
        reads.append((message_id, index))
        return photo

    view = make_view(qtbot)
    view.set_image_source(read)
    view.show_messages(rows)
    qtbot.waitUntil(lambda: (999, 0) in view.thumbnails_shown())
    assert reads == [(999, 0)]  # the first message's image is not on screen: not read
    layout = view.cards.layout(view.conversation.row(len(rows) - 1), view.row_rect(len(rows) - 1))
    with qtbot.waitSignal(view.image_opened) as opened:
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=layout.thumbs[0].center())
    assert opened.args[0].data == photo.data


def test_a_replys_thinking_streams_live_then_folds_above_the_answer(qtbot) -> None:
    view = make_view(qtbot, [MessageRow(1, "user", "Hi")])
    view.add_message(MessageRow(2, "assistant", "", streaming=True))
    view.show_streaming("", THOUGHT)
    qtbot.waitUntil(lambda: "I greet back." in view.shown_text())
    assert "Thinking…" in view.shown_text()
    view.show_streaming("Hello!", THOUGHT)
    qtbot.waitUntil(lambda: "Hello!" in view.shown_text())
    assert "I greet back." not in view.shown_text()
    assert "Thought for 7 words — click to show" in view.shown_text()


def test_clicking_the_folded_thinking_shows_it_and_again_hides_it(qtbot) -> None:
    view = make_view(
        qtbot, [MessageRow(1, "user", "Hi"), MessageRow(2, "assistant", "Hello!", THOUGHT)]
    )
    text = view.shown_text()
    assert "click to show" in text and "I greet back." not in text
    assert text.index("Thought for") < text.index("Hello!")
    height = view.row_rect(1).height()
    view.activate(1, "link", "think:0")
    assert "I greet back." in view.shown_text() and "click to hide" in view.shown_text()
    assert view.row_rect(1).height() > height  # the row grew to show it
    view.activate(1, "link", "think:0")
    assert "I greet back." not in view.shown_text()


def test_the_empty_state_says_what_to_try(qtbot) -> None:
    view = make_view(qtbot)
    view.set_empty_state("What can I help with?", ["Try: a question"])
    assert view.empty_state() == ("What can I help with?", ["Try: a question"])
    image = view.viewport().grab().toImage()
    centre = image.pixelColor(QPoint(image.width() // 2, image.height() // 2 - 20))
    background = image.pixelColor(QPoint(5, 5))
    assert any(
        image.pixelColor(QPoint(x, y)) != background
        for x in range(0, image.width(), 4)
        for y in range(image.height() // 2 - 80, image.height() // 2 + 40, 4)
    ), centre


def test_a_messages_menu_offers_its_actions(qtbot) -> None:
    view = make_view(qtbot, [MessageRow(1, "user", "Hi"), MessageRow(2, "assistant", "**Hello**")])
    menu = view.message_menu(1)
    assert menu is not None
    actions = {action.text(): action for action in menu.actions() if action.text()}
    assert list(actions) == ["Copy", "Copy as Markdown", "Edit", "Delete"]
    with qtbot.waitSignal(view.message_copied) as copied:
        actions["Copy as Markdown"].trigger()
    assert copied.args == ["**Assistant**\n\n**Hello**"]
    with qtbot.waitSignal(view.edit_requested) as edited:
        actions["Edit"].trigger()
    assert edited.args == [1]
