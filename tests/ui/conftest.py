"""Qt tests leave Qt's process-wide state as they found it."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QGuiApplication


@pytest.fixture(autouse=True)
def empty_clipboard(qapp):
    """Mime data a test put on the clipboard must go before Python does: Qt frees the
    clipboard in its exit handlers, after the interpreter, and freeing a Python-made
    QMimeData then segfaults the test run (exit code 139 after every test passed)."""
    yield
    QGuiApplication.clipboard().clear()


@pytest.fixture
def desktops(qtbot):
    """Whole desktop apps a test opened (ui.desktop.Desktop), closed after it."""
    opened: list = []
    yield opened
    for desktop in opened:
        desktop.close()
