"""Qt tests leave Qt's process-wide state as they found it; a whole desktop opens the same
way for every test that drives one."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtGui import QGuiApplication

from engine.generation.sampling import GREEDY
from engine.machine.profile import Profile
from ui.desktop import Desktop

TIMEOUT_MS = 60_000
SHORT = GREEDY.with_changes(max_tokens=12)


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


def no_gpu():
    """What the GPU reader says on this machine: no NVIDIA GPU, ggml only has the CPU."""
    return None, "no GPU found by NVML or ggml (NVML: NVIDIA driver not found; ggml: only CPU)"


@pytest.fixture
def open_desktop(qtbot, recorded_profile_here: Profile):
    """Open the whole desktop on a model, on the recorded profile as this machine's, and
    wait for the model to load: `open_desktop(model, read_gpu=no_gpu, n_ctx=1024)`."""

    def open_on(model: Path, read_gpu=no_gpu, n_ctx: int = 1024) -> Desktop:
        desktop = Desktop(str(model), recorded_profile_here, n_ctx, SHORT, read_gpu)
        qtbot.addWidget(desktop.window)
        with qtbot.waitSignal(desktop.bridge.model_loaded, timeout=TIMEOUT_MS):
            desktop.start()
        return desktop

    return open_on
