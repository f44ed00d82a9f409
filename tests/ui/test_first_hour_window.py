"""The window in a person's first hour: what it shows must be true.

"Think" is unticked while it cannot apply; "Load now" is off for the model
already loaded; a restored conversation's context meter shows what its last
reply used, not 0; the Help menu has About (version, llama.cpp build and
backends, folders), the keyboard shortcuts and the log folder. One real desktop
on the default model serves the end-to-end checks; the dialogs are rendered to
PNG in the test's temporary folder (a person looked at them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QObject, QUrl, Slot
from PySide6.QtGui import QDesktopServices

from app.paths import app_paths
from app.screen_text.about import about_facts
from app.stores.chat_store import ChatStore
from app.stores.model_library import ModelLibrary
from engine.generation.stats import FinishReason, GenerationStats
from ui.conversation.conversation_settings import ConversationSettings
from ui.models.model_manager import MODEL_PATH, ModelManager
from ui.window.help_dialogs import AboutDialog, ShortcutsDialog
from ui.window.main_window import MainWindow

LAST_REPLY = GenerationStats(
    prompt_tokens=187, reused_prompt_tokens=0, generated_tokens=41, time_to_first_token_s=0.4,
    prompt_tokens_per_s=400.0, decode_tokens_per_s=30.0, finish_reason=FinishReason.STOP,
)  # fmt: skip


def test_think_is_unticked_whenever_it_is_disabled(qtbot) -> None:
    settings = ConversationSettings()
    qtbot.addWidget(settings)
    cases = [(False, True), (True, True), (True, False), (False, False), (False, True)]
    shown = []
    for available, on in cases:
        settings.show_thinking(available, on)
        shown.append((settings.think.isEnabled(), settings.think.isChecked()))
        assert "thinking" not in settings.sampling() or available
    assert shown == [(False, False), (True, True), (True, False), (False, False), (False, False)]


def test_a_restored_conversation_shows_its_context_and_the_loaded_model_cannot_be_loaded_again(
    qtbot, desktops, default_model_file: Path, make_synthetic, tmp_path: Path, open_desktop
) -> None:
    with ChatStore() as store:
        conversation = store.create_conversation("Yesterday").conversation_id
        store.add_message(conversation, "user", "What is a GGUF file?")
        store.add_message(conversation, "assistant", "A model file.", stats=LAST_REPLY)
    other = tmp_path / "other-model.gguf"
    other.write_bytes(make_synthetic("llama", "F16", vocab_size=256).read_bytes())
    with ModelLibrary() as library:
        library.add(other)
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    window = desktop.window
    used = LAST_REPLY.prompt_tokens + LAST_REPLY.generated_tokens
    assert window.context_meter.value() == used  # not 0 until the next reply
    assert window.context_meter.text() == f"context {used:,} / 1,024"
    assert not window.settings.think.isEnabled() and not window.settings.think.isChecked()

    manager = desktop.open_models()
    paths = [_path(manager, row) for row in range(manager.table.rowCount())]
    manager.table.selectRow(paths.index(Path(default_model_file).resolve()))
    assert not manager.load_button.isEnabled()
    assert manager.load_button.toolTip() == "this model is loaded now"
    manager.table.selectRow(paths.index(other.resolve()))
    assert manager.load_button.isEnabled()
    manager.close()


def _path(manager: ModelManager, row: int) -> Path:
    entry = manager.library.find(manager.table.item(row, 0).data(MODEL_PATH))
    assert entry is not None
    return Path(entry.path).resolve()


class _FolderOpener(QObject):
    """Takes the file URLs the window asks the desktop to open (Qt's own handler hook)."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: list[QUrl] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.opened.append(url)


@pytest.fixture
def folder_opener():
    opener = _FolderOpener()
    QDesktopServices.setUrlHandler("file", opener, "open")
    yield opener
    QDesktopServices.unsetUrlHandler("file")


def test_the_help_menu_has_about_shortcuts_and_the_log_folder(
    qtbot, folder_opener: _FolderOpener, tmp_path: Path
) -> None:
    window = MainWindow()
    qtbot.addWidget(window)
    menus = [entry.text() for entry in window.menuBar().actions()]
    assert menus[-1] == "&Help"
    help_menu = window.menuBar().actions()[-1].menu()
    assert [a.text() for a in help_menu.actions()] == [
        "&Keyboard shortcuts", "Open the &log folder", "&About ShardChat",
    ]  # fmt: skip

    about = window.show_about()
    assert isinstance(about, AboutDialog)
    facts = about_facts()
    text = about.as_text()
    assert text.startswith(f"ShardChat {facts.version}") and facts.version != "unknown"
    assert "llama.cpp: llama-cpp-python " in text
    assert "libggml-cpu-" in about.rows["Backends"].text()  # the CPU module loaded, by file
    assert about.rows["Data folder"].text() == str(app_paths().data_dir)
    assert about.rows["Log folder"].text() == str(app_paths().log_dir)
    about.grab().save(str(tmp_path / "about.png"))
    about.open_logs.click()
    about.close()

    shortcuts = window.show_shortcuts()
    assert isinstance(shortcuts, ShortcutsDialog)
    table = shortcuts.table
    rows = {table.item(r, 0).text(): table.item(r, 1).text() for r in range(table.rowCount())}
    assert rows["New chat"] == "Ctrl+N" and rows["Keyboard shortcuts"] == "Ctrl+/"
    assert rows["Stop the reply"] == "Esc" and rows["Send the message"] == "Enter"
    assert len(rows) >= 12
    shortcuts.grab().save(str(tmp_path / "shortcuts.png"))
    shortcuts.close()

    window.open_logs_action.trigger()
    log_dir = QUrl.fromLocalFile(str(app_paths().log_dir))
    assert folder_opener.opened == [log_dir, log_dir] and app_paths().log_dir.is_dir()
