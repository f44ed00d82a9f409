"""The Share panel: one switch lends this computer's devices to ShardChat on another.

It renders an `app.screen_text.sharing_view.SharingView` and reports the switch and
the port; ui.server.sharing_controller decides what they do.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QFormLayout, QLabel, QSpinBox, QVBoxLayout, QWidget

from app.screen_text.sharing_view import SharingPhase, SharingView, status_text
from ui.theme import error_style


class SharingPanel(QWidget):
    switched = Signal(bool)  # the person turned sharing on (True) or off
    port_edited = Signal(int)

    def __init__(self) -> None:
        super().__init__()
        self._view = SharingView()
        self.switch = QCheckBox("Let other computers use this one")
        self.switch.setAccessibleName("Let other computers use this computer's GPU and memory")
        self.port = QSpinBox()
        self.port.setAccessibleName("Port")
        self.port.setRange(1, 65535)
        self.status = QLabel(wordWrap=True)
        self.status.setAccessibleName("What is lent, and how to reach it")
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error = QLabel(wordWrap=True)
        self.error.setAccessibleName("Why sharing is off")
        form = QFormLayout()
        form.addRow("Port", self.port)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("<b>Share this computer</b>"))
        layout.addWidget(self.switch)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addWidget(self.error)
        layout.addStretch(1)
        self.switch.clicked.connect(self.switched)  # the person's clicks, not show_view's
        self.port.valueChanged.connect(self.port_edited)
        self.show_view(self._view)

    def show_view(self, view: SharingView) -> None:
        self._view = view
        self.switch.blockSignals(True)
        self.switch.setChecked(view.switched_on)
        self.switch.blockSignals(False)
        self.switch.setEnabled(view.phase in (SharingPhase.OFF, SharingPhase.ON))
        self.port.blockSignals(True)
        self.port.setValue(view.port)
        self.port.blockSignals(False)
        self.port.setEnabled(view.editable)
        self.status.setText(status_text(view))
        self.error.setText(view.error)
        self.error.setVisible(bool(view.error))
        self.error.setStyleSheet(error_style(self.error))

    def view(self) -> SharingView:
        """The view on screen (for tests)."""
        return self._view
