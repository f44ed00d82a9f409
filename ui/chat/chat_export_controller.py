"""File → Export chat as Markdown: ask where to, then write the open conversation there.

app.conversation.chat_export does the writing (whole or not at all); this part only asks
for the path and says in the status bar how it went. The export module brings
a Markdown parser, so it is imported when first used, not with the window.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog

from app.conversation.chat_state import ChatState
from app.stores.chat_store import ChatStore
from engine.errors import BadInputError
from ui.window.main_window import MainWindow


class ChatExportController:
    def __init__(self, window: MainWindow, store: ChatStore, state: ChatState) -> None:
        self.window, self.store, self.state = window, store, state
        window.export_action.triggered.connect(self.export_chat)

    def export_chat(self) -> None:
        """File → Export chat as Markdown: where to, then the file (written whole or not at all)."""
        if self.state.conversation_id is None:
            return
        suggested = str(Path.home() / f"{safe_file_name(self.state.title())}.md")
        path, _filter = QFileDialog.getSaveFileName(
            self.window, "Export chat as Markdown", suggested, "Markdown (*.md)"
        )
        if path:
            self.export_to(Path(path))

    def export_to(self, path: Path) -> Path | None:
        """The path written, or None when the export was refused (said in the status bar)."""
        from app.conversation.chat_export import (
            export_conversation,  # its Markdown parser: when used
        )

        assert self.state.conversation_id is not None
        try:
            written = export_conversation(self.store, self.state.conversation_id, path)
        except BadInputError as exc:
            self.window.statusBar().showMessage(str(exc), 12000)
            return None
        self.window.statusBar().showMessage(f"exported the chat to {written}", 8000)
        return written


def safe_file_name(title: str) -> str:
    """A conversation title as a file name on every system (no separators or reserved signs)."""
    kept = "".join(c if c.isalnum() or c in " -_." else " " for c in title)
    return " ".join(kept.split())[:80].strip(" .") or "chat"
