"""Every control a person can reach has a name a screen reader can say, and the shortcuts exist."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSlider,
    QAbstractSpinBox,
    QHeaderView,
    QLineEdit,
    QPlainTextEdit,
    QScrollBar,
    QTextEdit,
    QWidget,
)

from app.stores.model_library import ModelLibrary
from ui.models.model_manager import ModelManager
from ui.profiling.profile_wizard import ProfileWizard
from ui.window.main_window import MainWindow

CONTROLS = (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSlider,
    QAbstractSpinBox,
    QLineEdit,
    QPlainTextEdit,
    QTextEdit,
)


def unnamed_controls(root: QWidget) -> list[str]:
    """Controls with neither an accessible name nor a visible text to be read out."""
    found = []
    for widget in root.findChildren(QWidget):
        if not isinstance(widget, CONTROLS) or widget.parent() is None:
            continue
        if isinstance(widget, QScrollBar | QHeaderView) or widget.objectName().startswith("qt_"):
            continue  # Qt's own parts: scroll bars, a spin box's line edit, header views
        if isinstance(widget.parent(), QAbstractSpinBox | QHeaderView):
            continue
        text = widget.text() if isinstance(widget, QAbstractButton) else ""
        if not widget.accessibleName() and not text.strip("&"):
            found.append(f"{type(widget).__name__} in {type(widget.parent()).__name__}")
    return found


def test_every_control_of_the_main_window_is_named(qtbot) -> None:
    window = MainWindow()
    qtbot.addWidget(window)
    assert unnamed_controls(window) == []


def test_every_control_of_the_model_manager_and_wizard_is_named(qtbot) -> None:
    with ModelLibrary() as library:
        manager = ModelManager(library)
        qtbot.addWidget(manager)
        assert unnamed_controls(manager) == []
    wizard = ProfileWizard()
    qtbot.addWidget(wizard)
    assert unnamed_controls(wizard) == []


def test_the_keyboard_shortcuts_are_bound(qtbot) -> None:
    window = MainWindow()
    qtbot.addWidget(window)
    shortcuts = {
        action.shortcut().toString(): action.text().replace("&", "")
        for action in window.findChildren(type(window.stop_action))
        if not action.shortcut().isEmpty()
    }
    assert shortcuts["Ctrl+N"] == "New chat" and shortcuts["Ctrl+F"] == "Search chats"
    assert shortcuts["Ctrl+,"] == "Conversation settings" and shortcuts["Esc"] == "Stop the reply"
