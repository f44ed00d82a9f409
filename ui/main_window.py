"""The main window: conversations on the left, the chat on the right, figures below.

Only layout and rendering live here; `ChatController` decides what happens.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
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

from ui.chat_view import ChatView
from ui.conversation_settings import ConversationSettings
from ui.message_input import MessageInput

CONVERSATION_ID = Qt.ItemDataRole.UserRole


class MainWindow(QMainWindow):
    def __init__(self) -> None:
        super().__init__()
        self.setWindowTitle("ShardChat")
        self.resize(1100, 720)
        self.search = QLineEdit(placeholderText="Search chats")
        self.conversations = QListWidget()
        self.new_chat = QPushButton("New chat")
        self.delete_chat = QPushButton("Delete chat")
        self.settings = ConversationSettings()
        self.chat_view = ChatView()
        self.input = MessageInput()
        self.send_button = QPushButton("Send")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.regenerate_button = QPushButton("Regenerate")
        self.edit_button = QPushButton("Edit last")
        self.model_label, self.plan_label, self.speed_label = QLabel(), QLabel(), QLabel()
        self._lay_out()

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
        row = QHBoxLayout()
        row.addWidget(self.input, stretch=1)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.regenerate_button)
        buttons.addWidget(self.edit_button)
        row.addLayout(buttons)
        right.addLayout(row)
        splitter = QSplitter()
        splitter.addWidget(sidebar)
        splitter.addWidget(chat)
        splitter.setSizes([260, 840])
        self.setCentralWidget(splitter)
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
        for button in (self.send_button, self.regenerate_button, self.edit_button):
            button.setEnabled(not busy)
