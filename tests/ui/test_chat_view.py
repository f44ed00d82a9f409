"""The chat view's Markdown: copy links under finished code blocks, and what they copy."""

from __future__ import annotations

from PySide6.QtCore import QBuffer, QIODevice, QUrl
from PySide6.QtGui import QGuiApplication, QImage, QTextDocument

from engine.model.image_input import ImageFile
from ui.chat_view import ChatView
from ui.code_blocks import with_copy_links

REPLY = "Here:\n\n```python\nprint('hi')\n```\n\nand\n\n- step\n  ~~~\n  make test\n  ~~~\n"


def test_every_closed_code_block_gets_one_copy_link_with_its_code() -> None:
    text, codes = with_copy_links(REPLY)
    assert codes == ["print('hi')\n", "make test\n"]
    assert text.count("(copy:0)") == 1 and text.count("(copy:1)") == 1
    assert "  [Copy code](copy:1)" in text  # indented: it stays inside the list item


def test_a_block_still_streaming_gets_no_link_until_it_closes() -> None:
    text, codes = with_copy_links("Look:\n\n```sh\nls -l\n")
    assert codes == [] and "copy:" not in text
    text, codes = with_copy_links("Look:\n\n```sh\nls -l\n```")
    assert codes == ["ls -l\n"] and "copy:0" in text


def test_backticks_inside_text_are_not_code_blocks() -> None:
    assert with_copy_links("use `make` or ``run``, not ```x``` inline")[1] == []


def test_clicking_a_copy_link_puts_that_block_on_the_clipboard(qtbot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.show_messages([("user", "code please"), ("assistant", REPLY)])
    assert "Copy code" in view.toPlainText() and "print('hi')" in view.toPlainText()
    with qtbot.waitSignal(view.code_copied) as copied:
        view.anchorClicked.emit(QUrl("copy:1"))
    assert copied.args == ["make test\n"]
    assert QGuiApplication.clipboard().text() == "make test\n"


def test_a_copy_link_for_a_block_that_is_gone_does_nothing(qtbot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.show_messages([("assistant", "no code here")])
    QGuiApplication.clipboard().setText("kept")
    view.anchorClicked.emit(QUrl("copy:3"))
    assert QGuiApplication.clipboard().text() == "kept"


def test_thumbnails_are_made_once_and_a_click_asks_for_the_whole_image(qtbot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    QImage(400, 200, QImage.Format.Format_RGB32).save(buffer, "PNG")
    photo = ImageFile("photo.png", bytes(buffer.data()))
    view.show_messages([("user", "Look", (photo,)), ("assistant", "Nice.")])
    first = view.loadResource(QTextDocument.ResourceType.ImageResource, QUrl("thumb:0"))
    assert (first.width(), first.height()) == (120, 60) and "(image:0)" in view.markdown()
    view.show_messages([("user", "Look", (ImageFile("photo.png", photo.data),))])  # re-read
    again = view.loadResource(QTextDocument.ResourceType.ImageResource, QUrl("thumb:0"))
    assert again.cacheKey() == first.cacheKey()  # the same thumbnail, not decoded again
    with qtbot.waitSignal(view.image_opened) as opened:
        view._on_link(QUrl("image:0"))
    assert opened.args[0].data == photo.data


THOUGHT = "The user greets me.\nI greet back."


def test_a_replys_thinking_streams_live_then_folds_above_the_answer(qtbot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.show_messages([("user", "Hi")])
    view.show_streaming("", THOUGHT)
    qtbot.waitUntil(lambda: "I greet back." in view.toPlainText())
    assert "Thinking…" in view.toPlainText()
    view.show_streaming("Hello!", THOUGHT)
    qtbot.waitUntil(lambda: "Hello!" in view.toPlainText())
    assert "I greet back." not in view.toPlainText()
    assert "Thought for 7 words — click to show" in view.toPlainText()


def test_clicking_the_folded_thinking_shows_it_and_again_hides_it(qtbot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.show_messages([("user", "Hi"), ("assistant", "Hello!", (), THOUGHT)])
    text = view.toPlainText()
    assert "click to show" in text and "I greet back." not in text
    assert text.index("Thought for") < text.index("Hello!")
    view.anchorClicked.emit(QUrl("think:1"))
    assert "I greet back." in view.toPlainText() and "click to hide" in view.toPlainText()
    view.anchorClicked.emit(QUrl("think:1"))
    assert "I greet back." not in view.toPlainText()
