"""The window opens without what only some of its panels need: the Hub's client
(huggingface_hub), the API server (aiohttp) and the document readers of summaries (bs4,
pypdf, python-docx) are imported when the panel that uses them is first opened, and
llama.cpp's multimodal library (mtmd) with the first image."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LATER = ("huggingface_hub", "aiohttp", "bs4", "pypdf", "docx", "llama_cpp.mtmd_cpp")
OPEN_WINDOW = """
import json, sys
from PySide6.QtCore import QEventLoop
from PySide6.QtWidgets import QApplication
from engine.model.default_model import default_model_path
from ui.desktop import Desktop

app = QApplication(sys.argv[:1])
desktop = Desktop(str(default_model_path()), None, 1024)
loop = QEventLoop()
desktop.bridge.model_loaded.connect(loop.quit)
desktop.start()
loop.exec()
later = {later!r}
opened = [name for name in later if name in sys.modules]
desktop.open_discover()
discovered = [name for name in later if name in sys.modules]
desktop.close()
print(json.dumps({{"opened": opened, "discovered": discovered}}))
"""


def test_the_window_and_its_model_load_without_the_hub_the_server_or_the_readers() -> None:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    run = subprocess.run(
        [sys.executable, "-c", OPEN_WINDOW.format(later=LATER)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    said = json.loads(run.stdout.strip().splitlines()[-1])
    assert said["opened"] == []
    assert "huggingface_hub" in said["discovered"]  # Discover opened: now it is needed
