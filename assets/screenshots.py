"""Render the README's pictures: the chat window, the wizard, the VRAM panel, the models.

Everything is the real thing, offscreen: the main window runs the embedded
default model and streams real replies; the wizard runs a real fast profile of
this machine; the model manager reads real GGUF files. The VRAM panel is shown
for a *described* 16 GB desktop (this machine has no GPU), planning a
shape-true Qwen3-30B-A3B; the picture says so in its title. The image
question runs a tiny synthetic Gemma 3 model and projector (random weights: the
image path is real, the answer is noise, and the title says so).

    make screenshots        (writes docs/assets/screenshots/*.png, shown by README and docs)
    .venv/bin/python assets/screenshots.py image_question    (one picture)
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "docs" / "assets" / "screenshots"
PROMPTS = (
    "Write a Python function that reverses a string, in a code block.",
    "Now list three ways to test it.",
)


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["SHARDCHAT_HOME"] = tempfile.mkdtemp(prefix="shardchat-screenshots-")
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("ShardChat")
    OUT.mkdir(exist_ok=True)
    shots = (
        wizard,
        main_window_light,
        main_window_dark,
        vram_panel,
        model_manager,
        image_question,
    )  # the wizard first: it profiles this machine
    wanted = set(sys.argv[1:])
    for shoot in shots:
        if wanted and shoot.__name__ not in wanted:
            continue
        path = shoot()
        print(f"wrote {path.relative_to(OUT.parent.parent)}")
    return 0


def wait_for(signal, timeout_s: float = 300.0) -> None:
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    signal.connect(loop.quit)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    loop.exec()


def settle(ms: int = 300) -> None:
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def dressed(scheme: str):  # noqa: ANN201 - a ThemeManager
    """The app in the light or dark theme, as the system's colour scheme would ask."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    from ui.theme import ThemeManager

    wanted = Qt.ColorScheme.Dark if scheme == "dark" else Qt.ColorScheme.Light
    theme = ThemeManager(system_scheme=lambda: wanted)
    theme.apply(QApplication.instance())  # type: ignore[arg-type]
    return theme


def main_window_light() -> Path:
    return main_window("light")


def main_window_dark() -> Path:
    return main_window("dark")


def main_window(scheme: str) -> Path:
    """A long conversation (a saved history of 60 exchanges with code and tables, and a
    reasoning reply with its thinking folded), the newest reply streaming live from the
    default model, in the light or the dark theme as the system would ask."""

    from app.model_lifecycle.load_planning import stored_profile
    from app.stores.chat_store import ChatStore
    from engine.generation.sampling import SamplingSettings
    from engine.model.default_model import default_model_path
    from ui.desktop import Desktop

    os.environ["SHARDCHAT_HOME"] = tempfile.mkdtemp(prefix=f"shardchat-window-{scheme}-")
    theme = dressed(scheme)
    with ChatStore() as store:
        seed_history(store)
    desktop = Desktop(
        str(default_model_path()), stored_profile(), 4096, SamplingSettings(0.0, max_tokens=200),
        theme=theme,
    )  # fmt: skip
    desktop.window.resize(1440, 860)
    desktop.start()
    wait_for(desktop.bridge.model_loaded)
    for prompt in PROMPTS:
        desktop.window.input.setPlainText(prompt)
        desktop.window.input.submit()
        wait_for(desktop.bridge.reply_finished)
    desktop.window.input.setPlainText("And what is its time complexity?")
    desktop.window.input.submit()
    for _ in range(12):
        wait_for(desktop.bridge.token_streamed)
    settle(120)
    path = OUT / f"main-window-{scheme}.png"
    desktop.window.grab().save(str(path))
    view = desktop.window.chat_view
    reasoning = next(i for i, row in enumerate(view.conversation.rows()) if row.thinking)
    view.scroll_to_row(max(0, reasoning - 1))
    settle(120)
    desktop.window.grab().save(str(OUT / f"reasoning-{scheme}.png"))
    desktop.close()
    return path


def seed_history(store) -> None:  # noqa: ANN001 - a ChatStore
    """A saved conversation of the kind people keep: many exchanges, then a reasoning reply
    (written here: the default model does not reason)."""
    from bench.gui_latency import ANSWER  # the benchmark's long conversations say the same

    for title in ("Trip to Lisbon: packing list", "Explain heat pumps", "Cover letter draft"):
        store.create_conversation(title)
    conversation = store.create_conversation("Sums, loops and recursion").conversation_id
    for number in range(60):
        store.add_message(conversation, "user", f"Question {number + 1}: how do I sum a list?")
        store.add_message(conversation, "assistant", ANSWER)
    store.add_message(conversation, "user", "Which one should I use for a million numbers?")
    reply = store.add_message(conversation, "assistant", "", complete=False).message_id
    store.update_message(
        reply,
        "Use the loop, or better `sum(values)`: it runs in C and needs no stack.",
        complete=True,
        thinking="A million elements. Recursion would pass Python's default limit of 1000 "
        "frames. The loop is O(n) with O(1) memory; the built-in sum is the same but faster.",
    )


def image_question() -> Path:
    """An image dropped on the input and asked about; its thumbnail in the conversation."""
    from PySide6.QtGui import QColor, QImage, QPainter

    from app.stores.model_library import ModelLibrary
    from engine.generation.sampling import SamplingSettings
    from tests.synthetic_vision import write_synthetic_vlm
    from ui.conversation.image_attachments import load_image_file
    from ui.desktop import Desktop

    os.environ["SHARDCHAT_HOME"] = tempfile.mkdtemp(prefix="shardchat-image-")
    folder = Path(tempfile.mkdtemp(prefix="shardchat-vlm-"))
    model, _mmproj = write_synthetic_vlm(folder)
    with ModelLibrary() as library:
        library.add(model)  # pairs the projector beside it
    picture = QImage(480, 320, QImage.Format.Format_RGB32)
    picture.fill(QColor("#f4a261"))
    painter = QPainter(picture)
    painter.fillRect(60, 60, 160, 120, QColor("#264653"))
    painter.fillRect(260, 140, 150, 120, QColor("#2a9d8f"))
    painter.end()
    picture.save(str(folder / "shapes.png"))
    desktop = Desktop(
        str(model), None, 1024, SamplingSettings(0.0, max_tokens=24), theme=dressed("dark")
    )
    desktop.window.resize(1360, 820)
    desktop.start()
    wait_for(desktop.bridge.model_loaded)
    desktop.window.input.add_attachments([load_image_file(folder / "shapes.png")])
    desktop.window.input.setPlainText("What shapes are in this picture?")
    desktop.window.input.submit()
    wait_for(desktop.bridge.reply_finished)
    desktop.window.setWindowTitle(
        "ShardChat — synthetic random-weight vision model (the image path is real; the answer "
        "is noise)"
    )
    settle(200)
    path = OUT / "image-question.png"
    desktop.window.grab().save(str(path))
    desktop.close()
    return path


def vram_panel() -> Path:
    """The panel for a described 16 GB desktop planning Qwen3-30B-A3B at a 10 GiB budget."""
    from dataclasses import replace

    from app.screen_text.vram_overview import vram_overview
    from bench.plan_simulation import MODELS
    from engine.machine.datasheets import DESCRIBED_MACHINES
    from engine.machine.described_machines import described_hardware, load_described
    from engine.model.inventory import read_inventory
    from engine.model.synthetic import write_shape_only_model
    from engine.planning.plan import PlanRequest
    from engine.planning.planner import make_plan
    from ui.vram.vram_panel import VramPanel

    spec, quant = MODELS["Qwen3-30B-A3B Q4_0"]
    with tempfile.TemporaryDirectory() as folder:
        inventory = read_inventory(write_shape_only_model(Path(folder) / "m.gguf", spec, quant))
    profile = load_described("desktop-16gb")
    plan = make_plan(inventory, profile, PlanRequest(10 << 30, n_ctx=8192))
    gpu = described_hardware(DESCRIBED_MACHINES["desktop-16gb"]).gpus[0]
    gpu = replace(gpu, vram_used_bytes=(10 << 30) + (900 << 20), other_processes_bytes=900 << 20)
    panel = VramPanel()
    panel.setWindowTitle("VRAM — described 16 GB desktop, Qwen3-30B-A3B Q4_0 (simulated)")
    panel.show_overview(vram_overview(plan, gpu))
    panel.resize(420, 420)
    panel.show()
    settle()
    path = OUT / "vram-panel.png"
    panel.grab().save(str(path))
    panel.close()
    return path


def model_manager() -> Path:
    from app.stores.model_library import ModelLibrary
    from engine.model.synthetic import write_synthetic_model
    from engine.model.synthetic_spec import SyntheticSpec
    from ui.models.model_manager import ModelManager

    folder = Path(os.environ["SHARDCHAT_HOME"]) / "models"
    folder.mkdir(parents=True, exist_ok=True)
    moe = SyntheticSpec("qwen3moe", n_layer=4, n_embd=256, n_expert=8, n_expert_used=2)
    manager = ModelManager(ModelLibrary())
    manager.resize(900, 560)
    manager.show()
    manager.import_files([write_synthetic_model(folder / "tiny-moe-Q8_0.gguf", moe, "Q8_0")])
    wait_for(manager.import_done)  # the files are checked off the GUI thread
    settle()
    path = OUT / "model-manager.png"
    manager.grab().save(str(path))
    manager.close()
    return path


def wizard() -> Path:
    """The results page after a real fast profile of this machine (stored: the window plans)."""
    from engine.machine.profile import ProfileMode
    from ui.profiling.profile_wizard import RESULTS_PAGE, ProfileWizard

    dressed("dark")  # LM Studio's default; the app follows the system
    wizard = ProfileWizard(mode=ProfileMode.FAST)
    wizard.show()
    wizard.next()
    wizard.next()
    wait_for(wizard.profiling_page.completeChanged)
    wizard.next()
    assert wizard.currentId() == RESULTS_PAGE
    settle()
    path = OUT / "wizard.png"
    wizard.grab().save(str(path))
    wizard.reject()
    return path


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
