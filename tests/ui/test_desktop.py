"""The whole desktop app (window, worker, history, VRAM panel) on the default model, offscreen."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QMimeData, Qt, QUrl
from PySide6.QtGui import QColor, QImage

from app.stores.chat_store import ChatStore, default_store_path
from app.stores.model_library import ModelLibrary
from app.stores.profile_store import ProfileStore
from engine.generation.sampling import GREEDY
from engine.machine.datasheets import DESCRIBED_MACHINES
from engine.machine.described_machines import described_hardware
from engine.remote.rpc_probe import RemoteDevice, RemoteServer
from tests.synthetic_vision import write_synthetic_vlm
from tests.synthetic_vocab import marker_vocabulary
from ui.conversation.image_attachments import load_image_file
from ui.conversation.image_viewer import ImageViewer
from ui.desktop import Desktop
from ui.models.model_manager import ModelManager
from ui.profiling.profile_wizard import ProfileWizard

TIMEOUT_MS = 60_000
SHORT = GREEDY.with_changes(max_tokens=12)


def laptop_gpu():
    """A described 8 GB laptop GPU with a game holding 1 GiB: what NVML would report there."""
    gpu = described_hardware(DESCRIBED_MACHINES["laptop-8gb"]).gpus[0]
    return replace(gpu, vram_used_bytes=1 << 30, other_processes_bytes=1 << 30), ""


def no_gpu():
    return None, "no GPU found by NVML or ggml (NVML: NVIDIA driver not found; ggml: only CPU)"


def send(qtbot, desktop: Desktop, text: str):
    with qtbot.waitSignal(desktop.bridge.reply_finished, timeout=TIMEOUT_MS) as finished:
        qtbot.keyClicks(desktop.window.input, text)
        qtbot.keyClick(desktop.window.input, Qt.Key.Key_Return)
    return finished.args[0]


def test_releasing_the_slider_replans_and_the_conversation_survives(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    desktop = open_desktop(default_model_file, laptop_gpu)
    desktops.append(desktop)
    panel = desktop.window.vram_panel
    assert panel.slider.isEnabled() and panel.slider.maximum() == 8 << 10  # MiB
    assert panel.explanation.text() == "NVIDIA GeForce RTX 4060 Laptop GPU — CUDA, 8.0 GiB"
    assert "other programs 1.0 GiB" in panel.live.text()
    first = send(qtbot, desktop, "My name is Ada.")
    with qtbot.waitSignal(desktop.bridge.plan_changed, timeout=TIMEOUT_MS) as changed:
        panel.slider.setSliderDown(True)
        panel.slider.setValue(3 << 10)
        assert "3.0 GiB" in panel.budget_label.text()
        panel.slider.setSliderDown(False)  # released: debounced, then re-planned
    assert changed.args[0].vram_budget_bytes == 3 << 30
    assert "3.0 GiB" in desktop.window.plan_label.text()
    second = send(qtbot, desktop, "What is my name?")
    assert second.stats.reused_prompt_tokens >= first.stats.prompt_tokens  # nothing lost
    roles = [m.role for m in desktop.store.messages(desktop.chat.conversation_id)]
    assert roles == ["user", "assistant", "user", "assistant"]


def test_without_a_gpu_the_slider_is_off_and_the_cpu_plan_is_shown(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    panel = desktop.window.vram_panel
    assert not panel.slider.isEnabled() and not panel.auto.isEnabled()
    assert panel.explanation.text() == (
        "no GPU found by NVML or ggml (NVML: NVIDIA driver not found; ggml: only CPU): "
        "the model runs on the CPU."
    )
    assert panel.family.text() == "cpu only" and "tokens/s predicted" in panel.chat.text()


def test_the_vram_panel_says_how_the_loaded_model_would_run_across_lent_computers(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    kept = RemoteServer("10.0.0.5", 50052, (7, 0, 0), (RemoteDevice(0, 8 << 30, 8 << 30),))
    with ProfileStore() as store:  # kept earlier; planning contacts no one
        store.remotes.save("tcp://10.0.0.5:50052", kept)
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    box = desktop.window.vram_panel.lent_computers
    qtbot.waitUntil(lambda: box.split.isVisibleTo(box), timeout=TIMEOUT_MS)
    assert box.table.rowCount() == 1 and box.table.item(0, 0).text() == "tcp://10.0.0.5:50052"
    assert "across these computers: split: blocks 0-29 here" in box.split.text()


def test_auto_follows_free_vram(qtbot, desktops, default_model_file, open_desktop) -> None:
    desktop = open_desktop(default_model_file, laptop_gpu)
    desktops.append(desktop)
    with qtbot.waitSignal(desktop.bridge.plan_changed, timeout=TIMEOUT_MS) as changed:
        desktop.window.vram_panel.auto.setChecked(True)
    assert changed.args[0].vram_budget_bytes == (7 << 30) - (512 << 20)  # free, less a reserve
    assert not desktop.window.vram_panel.slider.isEnabled()


def test_a_restart_reopens_the_last_conversation_where_the_window_was(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    desktop = open_desktop(default_model_file)
    send(qtbot, desktop, "Remember the word apple.")
    remembered = desktop.chat.conversation_id
    qtbot.mouseClick(desktop.window.new_chat, Qt.MouseButton.LeftButton)
    desktop.window.conversations.setCurrentRow(1)  # back to the older one
    assert desktop.chat.conversation_id == remembered
    desktop.window.resize(1200, 700)
    desktop.window.vram_dock.hide()
    desktop.close()
    again = open_desktop(default_model_file)
    desktops.append(again)
    assert again.chat.conversation_id == remembered
    assert "Remember the word apple." in again.window.chat_view.shown_text()
    assert again.window.height() == 700  # (the offscreen screen is 800 px: width is clamped)
    assert again.window.vram_dock.isHidden()


def test_a_new_context_length_reloads_the_model_and_keeps_the_chat(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    send(qtbot, desktop, "My name is Ada.")
    with qtbot.waitSignal(desktop.bridge.model_loaded, timeout=TIMEOUT_MS) as loaded:
        desktop.window.settings.n_ctx.setValue(2048)
    assert loaded.args[0].n_ctx == 2048
    assert "2048 tokens" in desktop.window.model_label.text()
    settings = desktop.store.conversation(desktop.chat.conversation_id).settings
    assert settings["n_ctx"] == 2048
    reply = send(qtbot, desktop, "What is my name?")
    assert reply.stats.prompt_tokens > 20  # the reloaded model heard the earlier exchange


def test_a_corrupt_history_is_moved_aside_with_a_message(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    path = default_store_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not a database" * 100)
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    assert "moved to" in desktop.window.statusBar().currentMessage()
    assert desktop.store.recovered_from is not None and desktop.store.recovered_from.exists()
    assert len(desktop.store.conversations()) == 1  # a fresh history with one new chat


def test_images_sent_to_a_model_without_vision_are_kept_with_a_message(
    qtbot, desktops, default_model_file, tmp_path, open_desktop
) -> None:
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    picture = QImage(32, 24, QImage.Format.Format_RGB32)
    picture.fill(QColor("red"))
    picture.save(str(tmp_path / "red.png"))
    window = desktop.window
    window.input.add_attachments([load_image_file(tmp_path / "red.png")])
    assert window.attachment_strip.isVisibleTo(window)
    qtbot.keyClicks(window.input, "What colour is this?")
    qtbot.keyClick(window.input, Qt.Key.Key_Return)
    message = window.statusBar().currentMessage()
    assert "cannot see images" in message and "Tools → Models" in message  # and how to fix it
    assert window.input.toPlainText() == "What colour is this?"
    assert [a.name for a in window.input.attachments()] == ["red.png"]
    assert desktop.store.messages(desktop.chat.conversation_id) == []


def test_the_tools_menu_reopens_the_profiling_wizard_and_skipping_changes_nothing(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    plan_before = desktop.window.plan_label.text()
    desktop.window.profile_action.trigger()
    wizard = desktop.window.findChild(ProfileWizard)
    assert wizard is not None and wizard.isVisible()
    wizard.reject()  # "Skip"
    assert desktop.window.plan_label.text() == plan_before and desktop.chat.model_ready


def file_drop(*paths: Path) -> QMimeData:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path)) for path in paths])
    return mime


def test_dropping_a_file_that_is_neither_model_nor_image_says_why_and_changes_nothing(
    qtbot, desktops, default_model_file, tmp_path, open_desktop
) -> None:
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list")
    models_before = [m.path for m in desktop.models.models()]
    desktop.model_drop.handle_drop(file_drop(notes))
    assert "notes.txt" in desktop.window.statusBar().currentMessage()
    assert desktop.window.input.refusal.text().startswith("notes.txt: not an image")  # by the input
    assert [m.path for m in desktop.models.models()] == models_before
    assert (
        desktop.window.input.attachments() == [] and desktop.window.findChild(ModelManager) is None
    )


def test_a_dropped_image_becomes_an_attachment(
    qtbot, desktops, default_model_file, tmp_path, open_desktop
):
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    picture = QImage(16, 16, QImage.Format.Format_RGB32)
    picture.fill(QColor("blue"))
    picture.save(str(tmp_path / "blue.bmp"))
    desktop.model_drop.handle_drop(file_drop(tmp_path / "blue.bmp"))
    assert [a.name for a in desktop.window.input.attachments()] == ["blue.bmp"]


def test_a_dropped_gguf_is_imported_and_load_now_switches_the_chat_to_it(
    qtbot, desktops, default_model_file, make_synthetic, open_desktop
) -> None:
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    send(qtbot, desktop, "Hello.")
    synthetic = make_synthetic("llama", "Q8_0")
    desktop.model_drop.handle_drop(file_drop(synthetic))
    manager = desktop.window.findChild(ModelManager)
    assert manager is not None and manager.isVisible()
    qtbot.waitUntil(  # the manager reads the file off the GUI thread first
        lambda: synthetic.resolve() in [m.path for m in desktop.models.models()], timeout=TIMEOUT_MS
    )
    assert manager.selected().path == synthetic.resolve()
    with qtbot.waitSignal(desktop.bridge.model_loaded, timeout=TIMEOUT_MS) as loaded:
        manager.request_load()
    assert Path(loaded.args[0].model_path).resolve() == synthetic.resolve()
    assert desktop.chat.model_ready and "loading" not in desktop.window.model_label.text()
    assert [m.role for m in desktop.store.messages(desktop.chat.conversation_id)] == [
        "user",
        "assistant",
    ]


def test_closing_while_a_reply_streams_keeps_what_it_said(
    qtbot, default_model_file, recorded_profile_here
) -> None:
    desktop = Desktop(
        str(default_model_file),
        recorded_profile_here,
        1024,
        GREEDY.with_changes(max_tokens=400),
        no_gpu,
    )
    qtbot.addWidget(desktop.window)
    with qtbot.waitSignal(desktop.bridge.model_loaded, timeout=TIMEOUT_MS):
        desktop.start()
    with qtbot.waitSignal(desktop.bridge.token_streamed, timeout=TIMEOUT_MS):
        qtbot.keyClicks(desktop.window.input, "Tell me a long story about a lighthouse.")
        qtbot.keyClick(desktop.window.input, Qt.Key.Key_Return)
    qtbot.wait(300)
    conversation = desktop.chat.conversation_id
    desktop.close()
    qtbot.wait(200)  # events still queued for the closed window must not touch the history
    with ChatStore(default_store_path()) as store:
        reply = store.messages(conversation)[-1]
    assert reply.role == "assistant" and reply.complete and reply.content.strip()


def test_a_vision_model_answers_about_a_dropped_image_and_shows_it(
    qtbot, desktops, tmp_path, open_desktop
) -> None:
    """A model paired with its projector in the model list sees images; the thumbnail opens."""
    model_file, mmproj = write_synthetic_vlm(tmp_path / "vlm")
    with ModelLibrary() as library:
        assert library.add(model_file).mmproj_path == mmproj.resolve()  # paired from the folder
    desktop = open_desktop(model_file)
    desktops.append(desktop)
    window, chat = desktop.window, desktop.chat
    assert "sees images" in window.model_label.text() and chat.vision is not None
    picture = tmp_path / "red.png"
    QImage(64, 48, QImage.Format.Format_RGB32).save(str(picture))
    window.input.add_attachments([load_image_file(picture)])
    finished = send(qtbot, desktop, "What is in the picture?")
    assert finished.stats.prompt_tokens > 16 and not window.input.attachments()
    (stored,) = [m for m in desktop.store.messages(chat.conversation_id) if m.images]
    assert stored.images[0].name == "red.png" and stored.content == "What is in the picture?"
    view = window.chat_view
    row = view.conversation.find(stored.id)
    assert row is not None and view.conversation.row(row).image_names == ("red.png",)
    qtbot.waitUntil(lambda: (stored.id, 0) in view.thumbnails_shown())  # read when drawn
    with qtbot.waitSignal(view.image_opened) as opened:
        view.activate(row, "image", 0)
    viewer = window.findChild(ImageViewer)
    assert opened.args[0].name == "red.png" and viewer is not None
    assert "64×48" in viewer.windowTitle()
    follow_up = send(qtbot, desktop, "And its colour?")  # the image stays in the conversation
    assert follow_up.stats.prompt_tokens > finished.stats.prompt_tokens
    with qtbot.waitSignal(desktop.bridge.reply_finished, timeout=TIMEOUT_MS):
        chat.regenerate()  # the last message again (text only)
    chat.edit_last()
    assert window.input.toPlainText() == "And its colour?" and not window.input.attachments()
    window.input.clear()
    chat.edit_last()  # now the first message comes back with its image
    assert window.input.toPlainText() == "What is in the picture?"
    assert [a.name for a in window.input.attachments()] == ["red.png"]
    assert [m.images for m in desktop.store.messages(chat.conversation_id)] == []


def test_the_model_line_says_the_prompt_format_and_follows_a_new_setting(
    qtbot, desktops, make_synthetic, open_desktop
) -> None:
    gemma_like = make_synthetic("llama", **marker_vocabulary(("<start_of_turn>", "<end_of_turn>")))
    with ModelLibrary() as library:
        library.add(gemma_like)
        library.set_prompt_format(gemma_like, "chatml")  # stored: used by the first load
    desktop = open_desktop(gemma_like)
    desktops.append(desktop)
    assert desktop.window.model_label.toolTip() == (
        "Prompt format: chatml (llama.cpp's built-in 'chatml', as set)"
    )
    manager = desktop.open_models()
    manager.refresh(select=gemma_like.resolve())
    manager.prompt_format.setCurrentText("auto")
    with qtbot.waitSignal(desktop.bridge.prompt_format_chosen, timeout=TIMEOUT_MS):
        manager.prompt_format.activated.emit(manager.prompt_format.currentIndex())
    tooltip = desktop.window.model_label.toolTip()
    assert tooltip.startswith("Prompt format: gemma (no chat template; the vocabulary has")
    assert send(qtbot, desktop, "Hi").stats.generated_tokens >= 1
