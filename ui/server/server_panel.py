"""The Local API server panel: one switch serves the window's model to other programs.

It renders an `app.screen_text.server_view.ServerView` (the settings, off / starting / on /
stopping, the address, why it is off) and reports what the person does: the
switch, and every edit of a field, as the `ServerSettings` the fields now read.
`ui.server.server_controller` decides what that does and hands back the next view. Only
copying the address happens here, because it changes no state.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.screen_text.server_view import (
    ServerPhase,
    ServerSettings,
    ServerView,
    client_hint,
    key_note,
)
from ui.theme import error_style

MAX_SLOTS = 64
W = TypeVar("W", bound=QWidget)


class ServerPanel(QWidget):
    switched = Signal(bool)  # the person turned the server on (True) or off
    settings_edited = Signal(object)  # ServerSettings, as the fields read after an edit
    copied = Signal(str)  # the address put on the clipboard

    def __init__(self) -> None:
        super().__init__()
        self._view = ServerView()
        self._make_controls()
        self._lay_out()
        self._connect()
        self.show_view(self._view)

    def _make_controls(self) -> None:
        self.switch = QCheckBox("Serve the loaded model to other programs (OpenAI API)")
        self.switch.setAccessibleName("Serve the loaded model over the OpenAI API")
        self.host = _named(QLineEdit(), "Host to listen on")
        self.host.setPlaceholderText("127.0.0.1")
        self.port = _named(QSpinBox(), "Port")
        self.port.setRange(0, 65535)
        self.port.setSpecialValueText("any free port")  # 0: the system picks one
        self.api_key = _named(QLineEdit(), "API key")
        self.api_key.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        self.api_key.setPlaceholderText("none")
        self.key_note = _named(QLabel(wordWrap=True), "When the API key is needed")
        self.slots = _named(QSpinBox(), "Parallel requests (slots)")
        self.slots.setRange(1, MAX_SLOTS)
        self.slots.setToolTip(
            "Requests decoded together; more wait in a queue. Each slot holds its own KV cache."
        )
        self.cors = _named(QLineEdit(), "Web pages allowed to call the API (CORS origins)")
        self.cors.setPlaceholderText("optional: https://example.org, http://localhost:3000")
        self.address = _named(QLineEdit(readOnly=True), "Server address")
        self.address.setPlaceholderText("not serving")
        self.copy = _named(QPushButton("Copy"), "Copy the server address")
        self.hint = _named(QLabel(wordWrap=True), "How clients connect")
        self.hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error = _named(QLabel(wordWrap=True), "Why the server is off")

    def _lay_out(self) -> None:
        key = QVBoxLayout()
        key.addWidget(self.api_key)
        key.addWidget(self.key_note)
        address = QHBoxLayout()
        address.addWidget(self.address, stretch=1)
        address.addWidget(self.copy)
        form = QFormLayout()
        form.addRow("Host", self.host)
        form.addRow("Port", self.port)
        form.addRow("API key", key)
        form.addRow("Slots", self.slots)
        form.addRow("CORS", self.cors)
        form.addRow("Address", address)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("<b>Local API server</b>"))
        layout.addWidget(self.switch)
        layout.addLayout(form)
        layout.addWidget(self.hint)
        layout.addWidget(self.error)
        layout.addStretch(1)

    def _connect(self) -> None:
        self.switch.clicked.connect(self.switched)  # the person's clicks, not show_view's
        for line in (self.host, self.api_key, self.cors):
            line.textEdited.connect(lambda _text: self._report_settings())
        for spin in (self.port, self.slots):
            spin.valueChanged.connect(lambda _value: self._report_settings())
        self.copy.clicked.connect(self.copy_address)

    # --- rendering ---

    def show_view(self, view: ServerView) -> None:
        self._view = view
        self._show_settings(view.settings)
        for field in (self.host, self.port, self.api_key, self.slots, self.cors):
            field.setEnabled(view.editable)
        self.switch.blockSignals(True)
        self.switch.setChecked(view.switched_on)
        self.switch.blockSignals(False)
        self.switch.setEnabled(view.phase in (ServerPhase.OFF, ServerPhase.ON))
        self.address.setText(view.base_url or "")
        self.copy.setEnabled(view.base_url is not None)
        self.hint.setText(client_hint(view))
        self.key_note.setText(key_note(view.settings))
        missing = view.settings.needs_key and not view.settings.api_key.strip()
        self.key_note.setStyleSheet(error_style(self.key_note) if missing else "")
        self.error.setText(view.error)
        self.error.setVisible(bool(view.error))
        self.error.setStyleSheet(error_style(self.error))

    def view(self) -> ServerView:
        """The view on screen (for tests and the status bar)."""
        return self._view

    def _show_settings(self, settings: ServerSettings) -> None:
        """Push the settings in without echoing them back as edits (nor moving the cursor)."""
        for line, text in (
            (self.host, settings.host),
            (self.api_key, settings.api_key),
            (self.cors, settings.cors_origins),
        ):
            if line.text() != text:
                line.setText(text)  # textEdited is the person's typing only
        for spin, value in ((self.port, settings.port), (self.slots, settings.n_slots)):
            spin.blockSignals(True)
            spin.setValue(value)
            spin.blockSignals(False)

    # --- what the person does ---

    def _report_settings(self) -> None:
        self.settings_edited.emit(
            replace(
                self._view.settings,
                host=self.host.text(),
                port=self.port.value(),
                api_key=self.api_key.text(),
                n_slots=self.slots.value(),
                cors_origins=self.cors.text(),
            )
        )

    def copy_address(self) -> None:
        """The base_url a client needs (http://host:port/v1) onto the clipboard."""
        if self._view.base_url is not None:
            QGuiApplication.clipboard().setText(self._view.base_url)
            self.copied.emit(self._view.base_url)


def _named(widget: W, name: str) -> W:
    widget.setAccessibleName(name)
    return widget
