"""The main window, laid out as LM Studio and Jan are: conversations on the left, the
model picker above the chat, settings, VRAM, folder summaries and the local API server
in a side panel.

Only layout and rendering live here; controllers decide what happens. The
menus hold every action with its shortcut, so the keyboard reaches everything.
"""

from __future__ import annotations

from PySide6.QtCore import QChildEvent, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMenu,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTabBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.paths import app_paths
from app.screen_text.about import about_facts
from ui.conversation.chat_view import ChatView
from ui.conversation.conversation_settings import ConversationSettings
from ui.conversation.image_attachments import AttachmentStrip
from ui.conversation.message_input import MessageInput
from ui.models.model_picker import ModelPicker
from ui.server.server_panel import ServerPanel
from ui.server.sharing_panel import SharingPanel
from ui.summaries.batch_panel import BatchPanel
from ui.summaries.jobs_view import JobsView
from ui.vram.vram_panel import VramPanel
from ui.window import side_tabs
from ui.window.help_dialogs import AboutDialog, ShortcutsDialog, open_folder
from ui.window.side_tabs import FullNameTips, side_dock, tab_bar_width

CONVERSATION_ID = Qt.ItemDataRole.UserRole
PANEL_MIN_WIDTH = 300  # the side panel's forms need this much, whatever its tabs say


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
        self.settings_dock = side_dock(side_tabs.SETTINGS, self)
        self.model_picker = ModelPicker()
        self.context_meter = _named(QProgressBar(), "Context used")
        self.panel_button = _named(QToolButton(), "Show or hide the side panel")
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
        self.api_label = _named(QLabel("API off"), "Local API server")
        self.vram_panel = VramPanel()
        self.vram_dock = side_dock(side_tabs.VRAM, self)
        self.batch_panel = BatchPanel()
        self.batch_dock = side_dock(side_tabs.SUMMARISE, self)
        self.server_panel = ServerPanel()
        self.server_dock = side_dock(side_tabs.API, self)
        self.sharing_panel = SharingPanel()
        self.sharing_dock = side_dock(side_tabs.SHARE, self)
        self.jobs_view = JobsView()
        self.jobs_dock = side_dock(side_tabs.JOBS, self)
        self.side_docks = (
            self.settings_dock, self.vram_dock, self.batch_dock, self.server_dock,
            self.sharing_dock, self.jobs_dock,
        )  # fmt: skip
        self.tab_tips = FullNameTips(side_tabs.ALL, self)
        self._make_actions()
        self._lay_out()
        self._make_menus()

    def _make_actions(self) -> None:
        self.new_chat_action = _action(self, "&New chat", QKeySequence.StandardKey.New)
        self.find_action = _action(self, "&Search chats", QKeySequence.StandardKey.Find)
        self.settings_action = _action(self, "Conversation &settings", "Ctrl+,")
        self.export_action = _action(self, "&Export chat as Markdown…", "Ctrl+Shift+E")
        self.stop_action = _action(self, "&Stop the reply", "Esc")
        self.import_model_action = _action(self, "&Import GGUF model…", "Ctrl+O")
        self.models_action = _action(self, "&Models…", "Ctrl+M")
        self.discover_action = _action(self, "&Discover models on Hugging Face…", "Ctrl+Shift+M")
        self.profile_action = _action(self, "&Profile this machine…", None)
        self.server_action = _action(self, "&Local API server…", None)
        self.batch_action = _action(self, "Summarise a &folder…", "Ctrl+Shift+S")
        self.jobs_action = _action(self, "&Jobs", "Ctrl+J")
        self.quit_action = _action(self, "&Quit", QKeySequence.StandardKey.Quit)
        self.about_action = _action(self, "&About ShardChat", None)
        self.shortcuts_action = _action(self, "&Keyboard shortcuts", "Ctrl+/")
        self.open_logs_action = _action(self, "Open the &log folder", None)
        self.about_action.triggered.connect(self.show_about)
        self.shortcuts_action.triggered.connect(self.show_shortcuts)
        self.open_logs_action.triggered.connect(lambda: open_folder(app_paths().log_dir))
        self.find_action.triggered.connect(self._focus_search)
        self.settings_action.triggered.connect(self._toggle_settings)
        self.new_chat_action.triggered.connect(self.new_chat.click)
        self.quit_action.triggered.connect(self.close)
        self.batch_action.triggered.connect(lambda: self._show_dock(self.batch_dock))
        self.server_action.triggered.connect(lambda: self._show_dock(self.server_dock))
        self.jobs_action.triggered.connect(lambda: self._show_dock(self.jobs_dock))

    def _make_menus(self) -> None:
        bar = self.menuBar()
        file = bar.addMenu("&File")
        for action in (self.new_chat_action, self.import_model_action, self.export_action):
            file.addAction(action)
        file.addSeparator()
        file.addAction(self.quit_action)
        chat = bar.addMenu("&Chat")
        for action in (self.find_action, self.settings_action, self.stop_action):
            chat.addAction(action)
        self.view_menu = view = bar.addMenu("&View")
        for dock in self.side_docks:
            view.addAction(dock.toggleViewAction())
        tools = bar.addMenu("&Tools")
        tools.addAction(self.models_action)
        tools.addAction(self.discover_action)
        tools.addAction(self.batch_action)
        tools.addAction(self.jobs_action)
        tools.addAction(self.profile_action)
        tools.addAction(self.server_action)
        help_menu = bar.addMenu("&Help")
        for action in (self.shortcuts_action, self.open_logs_action, self.about_action):
            help_menu.addAction(action)

    def _lay_out(self) -> None:
        splitter = QSplitter()
        splitter.addWidget(self._sidebar())
        splitter.addWidget(self._chat_column())
        splitter.setSizes([260, 740])
        splitter.setCollapsible(1, False)
        self.setCentralWidget(splitter)
        self._side_panel()
        for label in (self.model_label, self.plan_label, self.speed_label, self.api_label):
            self.statusBar().addPermanentWidget(label)

    def _sidebar(self) -> QWidget:
        sidebar = QWidget()
        side = QVBoxLayout(sidebar)
        self.new_chat.setObjectName("primary")
        side.addWidget(self.new_chat)
        side.addWidget(self.search)
        lines = self.conversations
        lines.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        lines.setTextElideMode(Qt.TextElideMode.ElideRight)  # long titles end in …
        lines.setWordWrap(False)
        lines.setUniformItemSizes(True)
        side.addWidget(lines)
        side.addWidget(self.delete_chat)
        return sidebar

    def _chat_column(self) -> QWidget:
        chat = QWidget()
        column = QVBoxLayout(chat)
        header = QHBoxLayout()
        header.addWidget(self.model_picker, stretch=1)
        self.context_meter.setMinimumWidth(190)
        self.context_meter.setMaximumWidth(240)
        self.context_meter.setTextVisible(True)
        self.show_context(0, 0)
        header.addWidget(self.context_meter)
        self.panel_button.setText("Settings")
        self.panel_button.setCheckable(True)
        self.panel_button.setChecked(True)
        self.panel_button.toggled.connect(self._show_side_panel)
        header.addWidget(self.panel_button)
        column.addLayout(header)
        column.addWidget(self.chat_view, stretch=1)
        column.addWidget(self.attachment_strip)
        row = QHBoxLayout()
        row.addWidget(self.input, stretch=1)
        buttons = QVBoxLayout()
        self.send_button.setObjectName("primary")
        for button in (self.send_button, self.stop_button, self.regenerate_button):
            buttons.addWidget(button)
        buttons.addWidget(self.edit_button)
        row.addLayout(buttons)
        column.addLayout(row)
        return chat

    def _side_panel(self) -> None:
        """Settings, VRAM, the folder summary, the API server, sharing and the jobs as tabs of one
        panel, never narrower than its tab bar needs to show every tab's word whole in the
        font and style the app has (a larger system font widens it)."""
        words = [dock.windowTitle() for dock in self.side_docks]
        width = max(PANEL_MIN_WIDTH, tab_bar_width(words))
        scroller = QScrollArea()
        scroller.setWidgetResizable(True)
        scroller.setFrameShape(QFrame.Shape.NoFrame)
        scroller.setWidget(self.settings)
        for dock, name, widget in (
            (self.settings_dock, "settings-dock", scroller),
            (self.vram_dock, "vram-dock", self.vram_panel),
            (self.batch_dock, "batch-dock", self.batch_panel),
            (self.server_dock, "server-dock", self.server_panel),
            (self.sharing_dock, "sharing-dock", self.sharing_panel),
            (self.jobs_dock, "jobs-dock", self.jobs_view),
        ):
            dock.setObjectName(name)
            dock.setWidget(widget)
            dock.setMinimumWidth(width)
            self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
        self.tabifyDockWidget(self.settings_dock, self.vram_dock)
        self.tabifyDockWidget(self.vram_dock, self.batch_dock)
        self.tabifyDockWidget(self.batch_dock, self.server_dock)
        self.tabifyDockWidget(self.server_dock, self.sharing_dock)
        self.tabifyDockWidget(self.sharing_dock, self.jobs_dock)
        self.settings_dock.raise_()
        self.resizeDocks([self.settings_dock], [width], Qt.Orientation.Horizontal)
        for dock in self.side_docks:
            dock.visibilityChanged.connect(lambda _shown: self._sync_panel_button())

    def show_context(self, used: int, window: int) -> None:
        """The context meter: how much of the model's context the conversation fills."""
        self.context_meter.setRange(0, max(1, window))
        self.context_meter.setValue(min(used, max(1, window)))
        self.context_meter.setFormat(
            f"context {used:,} / {window:,}" if window else "context: not measured yet"
        )
        share = used / window if window else 0.0
        self.context_meter.setToolTip(
            f"{share:.0%} of the context window is used; older messages are left out "
            "of the prompt when it is full"
        )

    def _show_side_panel(self, shown: bool) -> None:
        for dock in self.side_docks:
            dock.setVisible(shown)
        if shown:
            self.settings_dock.raise_()

    def _sync_panel_button(self) -> None:
        shown = any(dock.isVisible() for dock in self.side_docks)
        self.panel_button.blockSignals(True)
        self.panel_button.setChecked(shown)
        self.panel_button.blockSignals(False)

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

    def show_about(self) -> AboutDialog:
        """Help → About: the version, llama.cpp's build and backends, the folders."""
        dialog = AboutDialog(about_facts(), self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def show_shortcuts(self) -> ShortcutsDialog:
        """Help → Keyboard shortcuts, read from the menus' own actions."""
        menus = [entry.menu() for entry in self.menuBar().actions()]
        actions = [a for menu in menus if isinstance(menu, QMenu) for a in menu.actions()]
        dialog = ShortcutsDialog(actions, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def childEvent(self, event: QChildEvent) -> None:  # noqa: N802 - Qt's name
        """Qt makes the side panel's tab bars as it tabs docks together; each new one shows
        the full names as tooltips."""
        super().childEvent(event)
        child = event.child()
        if event.polished() and isinstance(child, QTabBar):
            self.tab_tips.watch(child)

    def _show_dock(self, dock: QDockWidget) -> None:
        dock.show()
        dock.raise_()

    def _focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def _toggle_settings(self) -> None:
        """Ctrl+,: the settings tab of the side panel, or the panel away if it is in front."""
        if self.settings_dock.isVisible() and not self.settings_dock.visibleRegion().isEmpty():
            self.settings_dock.hide()
            return
        self.settings_dock.show()
        self.settings_dock.raise_()
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
