"""The chat window as people use it, on the real default model: long conversations,
images read when shown, the theme, the model picker, export, and any message's actions."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QBuffer, QIODevice, QSettings, Qt
from PySide6.QtGui import QImage

from app.conversation.chat_state import PAGE_MESSAGES
from app.stores.chat_store import ChatStore
from app.stores.model_library import ModelLibrary
from engine.model.image_input import ImageFile
from tests.ui.test_desktop import TIMEOUT_MS, send
from ui.desktop import Desktop
from ui.theme import DARK, LIGHT, ThemeChoice, ThemeManager

ANSWER = "Compare:\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\nprint('hi')\n```\n\n- one\n"


def png() -> bytes:
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image = QImage(64, 48, QImage.Format.Format_RGB32)
    image.fill(0x2A9D8F)
    image.save(buffer, "PNG")
    return bytes(buffer.data())


def seed(exchanges: int, first_image: bool = False, last_image: bool = False) -> int:
    """A saved conversation of `exchanges` questions and table-and-code answers."""
    with ChatStore() as store:
        conversation = store.create_conversation("Long one").conversation_id
        for number in range(exchanges):
            image = first_image and number == 0 or last_image and number == exchanges - 1
            images = (ImageFile(f"photo-{number}.png", png()),) if image else ()
            store.add_message(conversation, "user", f"Question {number}?", images=images)
            store.add_message(conversation, "assistant", ANSWER)
        return conversation


def test_a_reply_streams_into_a_long_conversation_without_redrawing_it(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    seed(300)
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    view = desktop.window.chat_view
    assert view.conversation.rowCount() == PAGE_MESSAGES  # the newest page: older on scrolling
    assert sum(view._exact) < 40  # only what is on screen was laid out
    versions = [row.version for row in view.conversation.rows()]
    finished = send(qtbot, desktop, "Say hello.")
    rows = view.conversation.rows()
    assert [row.version for row in rows[:PAGE_MESSAGES]] == versions  # old rows not touched
    assert [row.role for row in rows[PAGE_MESSAGES:]] == ["user", "assistant"]
    assert rows[-1].text == finished.text and not rows[-1].streaming
    assert rows[-1].stats and rows[-1].stats["generated_tokens"] == finished.stats.generated_tokens
    assert view.is_following()


def test_images_are_read_from_the_history_only_when_their_message_is_drawn(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    conversation = seed(150, first_image=True, last_image=True)
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    view = desktop.window.chat_view
    messages = desktop.store.messages(conversation, with_images=False)
    first, last = messages[0].id, messages[-2].id
    qtbot.waitUntil(lambda: (last, 0) in view.thumbnails_shown(), timeout=TIMEOUT_MS)
    assert (first, 0) not in view.images_read  # far above the screen: never read
    scroll_to_the_first_message(qtbot, view)
    view.viewport().repaint()
    qtbot.waitUntil(lambda: (first, 0) in view.thumbnails_shown(), timeout=TIMEOUT_MS)


def test_the_theme_follows_the_system_until_the_person_chooses(
    qtbot, desktops, default_model_file, tmp_path: Path
) -> None:
    scheme = [Qt.ColorScheme.Dark]
    settings = QSettings(str(tmp_path / "window.ini"), QSettings.Format.IniFormat)
    theme = ThemeManager(settings, system_scheme=lambda: scheme[0])
    desktop = Desktop(str(default_model_file), None, 1024, theme=theme)
    desktops.append(desktop)
    qtbot.addWidget(desktop.window)
    view = desktop.window.chat_view
    assert view.cards.colours == DARK
    scheme[0] = Qt.ColorScheme.Light
    theme.system_scheme_changed()
    assert view.cards.colours == LIGHT
    menu = next(a.menu() for a in desktop.window.view_menu.actions() if a.menu() is not None)
    dark = next(a for a in menu.actions() if a.text() == "Dark")
    dark.trigger()
    assert view.cards.colours == DARK and theme.choice() is ThemeChoice.DARK
    theme.system_scheme_changed()  # the system no longer decides
    assert view.cards.colours == DARK


def test_the_model_picker_lists_the_models_and_switches_to_one(
    qtbot, desktops, default_model_file, make_synthetic, open_desktop
) -> None:
    other = make_synthetic("llama", "F16")
    with ModelLibrary() as library:
        library.add(other)
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    picker = desktop.window.model_picker
    paths = [Path(entry.path).resolve() for entry in picker.entries()]
    assert Path(default_model_file).resolve() in paths and other.resolve() in paths
    assert Path(picker.current_entry().path).resolve() == Path(default_model_file).resolve()
    assert "MiB" in picker.itemText(0)  # each model says its size
    with qtbot.waitSignal(desktop.bridge.model_loaded, timeout=TIMEOUT_MS):
        picker.setCurrentIndex(paths.index(other.resolve()))
        picker.activated.emit(paths.index(other.resolve()))
    assert Path(picker.current_entry().path).resolve() == other.resolve()
    assert Path(desktop.chat.model_path()).resolve() == other.resolve()


def test_a_conversation_exports_to_markdown(
    qtbot, desktops, default_model_file, tmp_path: Path, open_desktop
) -> None:
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    finished = send(qtbot, desktop, "Name a colour.")
    written = desktop.chat.export_to(tmp_path / "chat.md")
    assert written is not None
    text = written.read_text(encoding="utf-8")
    assert "## You\n\nName a colour." in text and finished.text.strip() in text
    assert desktop.chat.export_to(tmp_path / "missing" / "chat.md") is None  # refused, said
    assert "does not exist" in desktop.window.statusBar().currentMessage()


def test_any_message_can_be_deleted_or_edited(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    send(qtbot, desktop, "First question.")
    send(qtbot, desktop, "Second question.")
    view, store, chat = desktop.window.chat_view, desktop.store, desktop.chat
    view.delete_requested.emit(1)  # the first reply
    roles = [m.role for m in store.messages(chat.conversation_id)]
    assert roles == ["user", "user", "assistant"] and view.conversation.rowCount() == 3
    view.edit_requested.emit(0)  # the first question: back in the input, what followed gone
    assert desktop.window.input.toPlainText() == "First question."
    assert store.messages(chat.conversation_id) == [] and view.conversation.rowCount() == 0
    send(qtbot, desktop, " again")
    reply = view.conversation.rowCount() - 1
    view.edit_requested.emit(reply)
    editor = chat.reply_editor
    assert editor is not None and editor.isVisible()
    editor.setTextValue("A corrected reply.")
    editor.accept()
    assert store.messages(chat.conversation_id)[-1].content == "A corrected reply."
    assert view.conversation.row(reply).text == "A corrected reply."
    assert store.history(chat.conversation_id)[-1].content == "A corrected reply."


def scroll_to_the_first_message(qtbot, view) -> None:  # noqa: ANN001 - ChatView
    """Up to the top, again each time older messages were read in above it."""
    while view._more_above:
        count = view.conversation.rowCount()
        view.scroll_to_row(0)
        qtbot.waitUntil(lambda c=count: view.conversation.rowCount() > c, timeout=TIMEOUT_MS)
    view.scroll_to_row(0)


def test_a_long_chat_opens_on_its_newest_page_and_reads_older_ones_scrolled_up_to(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    conversation = seed(1000)
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    view = desktop.window.chat_view
    stored = desktop.store.messages(conversation, with_images=False)
    assert [row.message_id for row in view.conversation.rows()] == [
        message.id for message in stored[-PAGE_MESSAGES:]
    ]
    view.scroll_to_row(0)  # the oldest read so far, at the top of the screen
    top_id = view.conversation.row(0).message_id
    top = view.row_rect(0).top()
    qtbot.waitUntil(lambda: view.conversation.rowCount() == 2 * PAGE_MESSAGES)
    index = view.conversation.find(top_id)
    assert index == PAGE_MESSAGES and view.row_rect(index).top() == top  # the text stays put
    scroll_to_the_first_message(qtbot, view)
    assert [row.message_id for row in view.conversation.rows()] == [m.id for m in stored]
    assert view.conversation.row(0).text == "Question 0?"
