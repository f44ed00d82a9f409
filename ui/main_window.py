"""The main window: conversations on the left, the chat in the middle, VRAM on the right.

Only layout and rendering live here; controllers decide what happens. The
menus hold every action with its shortcut, so the keyboard reaches everything.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ui.batch_panel import BatchPanel
from ui.chat_view import ChatView
from ui.conversation_settings import ConversationSettings
from ui.image_attachments import AttachmentStrip
from ui.message_input import MessageInput
from ui.vram_panel import VramPanel

CONVERSATION_ID = Qt.ItemDataRole.UserRole


class MainWindow(QMainWindow):
    def __init__(self) -> None:
        super().__init__()
        self.setWindowTitle("ShardChat")
        self.resize(1280, 760)
        self.search = _named(QLineEdit(placeholderText="Search chats (Ctrl+F)"), "Search chats")
        self.conversations = _named(QListWidget(), "Conversations")
        self.new_chat = _named(QPushButton("New chat"), "New chat")
        self.delete_chat = _named(QPushButton("Delete chat"), "Delete chat")
        self.settings = ConversationSettings()
        self.chat_view = ChatView()
        self.input = MessageInput()
        self.attachment_strip = AttachmentStrip()
        self.input.attachments_changed.connect(self.attachment_strip.show_attachments)
        self.attachment_strip.remove_requested.connect(self.input.remove_attachment)
        self.input.attachment_refused.connect(lambda why: self.statusBar().showMessage(why, 6000))
        self.send_button = _named(QPushButton("Send"), "Send message")
        self.stop_button = _named(QPushButton("Stop"), "Stop the reply")
        self.stop_button.setEnabled(False)
        self.regenerate_button = _named(QPushButton("Regenerate"), "Regenerate the last reply")
        self.edit_button = _named(QPushButton("Edit last"), "Edit the last message")
        self.model_label, self.plan_label, self.speed_label = QLabel(), QLabel(), QLabel()
        self.vram_panel = VramPanel()
        self.vram_dock = QDockWidget("VRAM", self)
        self.batch_panel = BatchPanel()
        self.batch_dock = QDockWidget("Summarise a folder", self)
        self._make_actions()
        self._lay_out()
        self._make_menus()

    def _make_actions(self) -> None:
        self.new_chat_action = _action(self, "&New chat", QKeySequence.StandardKey.New)
        self.find_action = _action(self, "&Search chats", QKeySequence.StandardKey.Find)
        self.settings_action = _action(self, "Conversation &settings", "Ctrl+,")
        self.stop_action = _action(self, "&Stop the reply", "Esc")
        self.import_model_action = _action(self, "&Import GGUF model…", "Ctrl+O")
        self.models_action = _action(self, "&Models…", "Ctrl+M")
        self.profile_action = _action(self, "&Profile this machine…", None)
        self.batch_action = _action(self, "Summarise a &folder…", "Ctrl+Shift+S")
        self.quit_action = _action(self, "&Quit", QKeySequence.StandardKey.Quit)
        self.find_action.triggered.connect(self._focus_search)
        self.settings_action.triggered.connect(self._toggle_settings)
        self.new_chat_action.triggered.connect(self.new_chat.click)
        self.quit_action.triggered.connect(self.close)
        self.batch_action.triggered.connect(self._show_batch)

    def _make_menus(self) -> None:
        bar = self.menuBar()
        file = bar.addMenu("&File")
        for action in (self.new_chat_action, self.import_model_action):
            file.addAction(action)
        file.addSeparator()
        file.addAction(self.quit_action)
        chat = bar.addMenu("&Chat")
        for action in (self.find_action, self.settings_action, self.stop_action):
            chat.addAction(action)
        view = bar.addMenu("&View")
        view.addAction(self.vram_dock.toggleViewAction())
        view.addAction(self.batch_dock.toggleViewAction())
        tools = bar.addMenu("&Tools")
        tools.addAction(self.models_action)
        tools.addAction(self.batch_action)
        tools.addAction(self.profile_action)

    def _lay_out(self) -> None:
        sidebar = QWidget()
        side = QVBoxLayout(sidebar)
        side.addWidget(self.new_chat)
        side.addWidget(self.search)
        side.addWidget(self.conversations)
        side.addWidget(self.delete_chat)
        chat = QWidget()
        right = QVBoxLayout(chat)
        right.addWidget(self.settings)
        right.addWidget(self.chat_view, stretch=1)
        right.addWidget(self.attachment_strip)
        row = QHBoxLayout()
        row.addWidget(self.input, stretch=1)
        buttons = QVBoxLayout()
        for button in (self.send_button, self.stop_button, self.regenerate_button):
            buttons.addWidget(button)
        buttons.addWidget(self.edit_button)
        row.addLayout(buttons)
        right.addLayout(row)
        splitter = QSplitter()
        splitter.addWidget(sidebar)
        splitter.addWidget(chat)
        splitter.setSizes([250, 750])
        self.setCentralWidget(splitter)
        self.vram_dock.setObjectName("vram-dock")
        self.vram_dock.setWidget(self.vram_panel)
        self.vram_dock.setMinimumWidth(280)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.vram_dock)
        self.batch_dock.setObjectName("batch-dock")
        self.batch_dock.setWidget(self.batch_panel)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.batch_dock)
        self.tabifyDockWidget(self.vram_dock, self.batch_dock)
        self.vram_dock.raise_()
        for label in (self.model_label, self.plan_label, self.speed_label):
            self.statusBar().addPermanentWidget(label)

    def show_conversations(self, items: list[tuple[int, str]], current: int | None) -> None:
        """(id, title) pairs; keeps the current one selected without emitting a change."""
        self.conversations.blockSignals(True)
        self.conversations.clear()
        for conversation_id, title in items:
            item = QListWidgetItem(title)
            item.setData(CONVERSATION_ID, conversation_id)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)  # double-click renames
            self.conversations.addItem(item)
            if conversation_id == current:
                self.conversations.setCurrentItem(item)
        self.conversations.blockSignals(False)

    def set_busy(self, busy: bool) -> None:
        """While a reply streams: Stop is live; Send, Regenerate and Edit are not."""
        self.stop_button.setEnabled(busy)
        self.stop_action.setEnabled(busy)
        for button in (self.send_button, self.regenerate_button, self.edit_button):
            button.setEnabled(not busy)

    def _show_batch(self) -> None:
        self.batch_dock.show()
        self.batch_dock.raise_()

    def _focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def _toggle_settings(self) -> None:
        self.settings.setVisible(not self.settings.isVisible())
        if self.settings.isVisible():
            self.settings.system_prompt.setFocus()


def _named(widget, name: str):  # noqa: ANN001, ANN202 - any widget, returned as given
    widget.setAccessibleName(name)
    return widget


def _action(
    window: QMainWindow, text: str, shortcut: QKeySequence.StandardKey | str | None
) -> QAction:
    action = QAction(text, window)
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
    return action
