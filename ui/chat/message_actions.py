"""What the chat's message actions do: Regenerate, Edit last, and Edit or Delete on a message.

Each changes what the model remembers, so each ends by giving the worker the
conversation again (through `reopen`, the controller's way of opening the
conversation, or start_conversation when the rows shown stay as they are).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QInputDialog

from app.conversation.chat_state import ChatState
from app.engine_host.engine_client import EngineClient
from app.stores.chat_records import StoredMessage
from engine.errors import BadInputError
from engine.model.image_input import ImageFile
from ui.conversation.image_attachments import image_from_bytes
from ui.window.main_window import MainWindow


class MessageActions:
    def __init__(
        self,
        window: MainWindow,
        worker: EngineClient,
        state: ChatState,
        send: Callable[[str, Sequence[ImageFile]], None],
        reopen: Callable[[], None],
    ) -> None:
        self.window, self.worker, self.state = window, worker, state
        self._send, self._reopen = send, reopen
        self.reply_editor: QInputDialog | None = None  # the open "Edit reply" dialog

    def regenerate(self) -> None:
        """Ask again: the last reply goes, the last message (and its images) is sent once more."""
        last = self.state.last_user_message()
        why = self.state.cannot_send(bool(last and last.images))
        if last is None or why:
            if why:
                self.window.statusBar().showMessage(why, 12000)
            return
        self._take_back(last)
        self._send(last.content, last.images)

    def edit_last(self) -> None:
        """Put the last message (text and images) back in the input box, with its reply gone."""
        last = self.state.last_user_message()
        if last is not None and self.state.can_change_messages():
            self._put_back(last)

    def edit_message(self, index: int) -> None:
        """Edit on a message: yours goes back to the input box with what followed it gone
        (as Edit last does); a reply opens in an editor and is saved as corrected."""
        row = self.window.chat_view.conversation.row(index)
        if row.message_id is None or not self.state.can_change_messages():
            return
        if row.role == "user":
            message = self.state.stored(row.message_id)
            if message is not None:
                self._put_back(message)
            return
        self._open_reply_editor(index, row.message_id, row.text)

    def delete_message(self, index: int) -> None:
        """Delete on a message: it goes from the conversation and from what the model sees."""
        view = self.window.chat_view
        row = view.conversation.row(index)
        if row.message_id is None or self.state.reply is not None:
            return
        self.state.delete_message(row.message_id)
        view.remove_messages(index)
        if self.state.model.ready:
            self.worker.start_conversation(None, self.state.stored_history())

    def _put_back(self, last: StoredMessage) -> None:
        self._take_back(last)
        self.window.input.setPlainText(last.content)
        try:
            attachments = [image_from_bytes(image.data, image.name) for image in last.images]
        except BadInputError as exc:  # a saved image that no longer decodes: keep the text
            attachments = []
            self.window.statusBar().showMessage(str(exc), 8000)
        self.window.input.add_attachments(attachments)
        self.window.input.setFocus()

    def _take_back(self, last: StoredMessage) -> None:
        """Remove a user message and what followed it; the model forgets them too."""
        self.state.take_back(last)
        self._reopen()

    def _open_reply_editor(self, index: int, message_id: int, text: str) -> QInputDialog:
        editor = QInputDialog(self.window)
        editor.setWindowTitle("Edit reply")
        editor.setLabelText("The model will see this text as its reply from now on:")
        editor.setOption(QInputDialog.InputDialogOption.UsePlainTextEditForTextInput)
        editor.setTextValue(text)
        editor.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        editor.textValueSelected.connect(
            lambda edited: self._save_edited_reply(index, message_id, edited)
        )
        editor.open()
        self.reply_editor = editor
        return editor

    def _save_edited_reply(self, index: int, message_id: int, text: str) -> None:
        row = self.state.edit_reply(message_id, text)
        view = self.window.chat_view
        if index < view.conversation.rowCount() and view.conversation.row(index).message_id == (
            message_id
        ):
            view.replace_message(index, row)
        self.worker.start_conversation(None, self.state.stored_history())
