"""What the conversation list does: new, delete, switch, rename and search conversations.

The list only shows ChatState's (id, title) pairs; every switch first stops
the reply (it belongs to the conversation being left) and then opens the one
landed on, both through the callables the chat controller gives it.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QListWidgetItem

from app.conversation.chat_state import ChatState
from ui.window.main_window import CONVERSATION_ID, MainWindow


class ConversationListController:
    def __init__(
        self,
        window: MainWindow,
        state: ChatState,
        stop: Callable[[], None],
        open_conversation: Callable[[], None],
    ) -> None:
        """`stop` ends the reply under way; `open_conversation` shows the open conversation
        and gives the model its history."""
        self.window, self.state = window, state
        self._stop, self._open = stop, open_conversation
        w = window
        w.new_chat.clicked.connect(self.new_conversation)
        w.delete_chat.clicked.connect(self.delete_conversation)
        w.conversations.itemChanged.connect(self._on_item_renamed)
        w.conversations.currentItemChanged.connect(self._on_item_changed)
        w.search.textChanged.connect(lambda _text: self.refresh_list())

    def new_conversation(self) -> None:
        self._stop()
        self.state.new_conversation()
        self.window.search.clear()
        self.refresh_list()
        self._open()

    def delete_conversation(self) -> None:
        """Delete the open conversation and open the newest other one (or a new one)."""
        if self.state.conversation_id is None or self.state.reply is not None:
            return
        if self.state.delete_open() is None:
            self.new_conversation()
            return
        self.refresh_list()
        self._open()

    def refresh_list(self) -> None:
        """Titles and order change as conversations are asked and named; the search stays."""
        items = self.state.listed(self.window.search.text())
        self.window.show_conversations(items, self.state.conversation_id)

    def _on_item_changed(self, item: QListWidgetItem | None, _previous: object) -> None:
        if item is not None:
            self._stop()
            self.state.conversation_id = int(item.data(CONVERSATION_ID))
            self._open()

    def _on_item_renamed(self, item: QListWidgetItem) -> None:
        self.state.rename(int(item.data(CONVERSATION_ID)), item.text())
