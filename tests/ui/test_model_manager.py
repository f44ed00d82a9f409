"""The Models dialog with a real model list, real GGUF files and real Qt events (offscreen).

Only Qt's own modal file pickers are replaced (they would wait for a person);
the removal confirmation is the real QMessageBox, answered by a timer. Files are
read on the dialog's worker, so tests wait for the details and for `import_done`.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QTimer, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox, QWidget

from app.stores.model_library import ModelLibrary
from engine.model.default_model import default_model_path
from engine.model.inventory import ModelInventory, read_inventory
from tests.synthetic_vocab import marker_vocabulary
from ui.model_drop import GgufDropFilter, dropped_paths, gguf_paths
from ui.models.model_manager import (
    DEFAULT,
    KIND,
    NAME,
    READING_PENDING,
    READING_ROW,
    SIZE,
    STATUS,
    ModelManager,
)

READ_MS = 60_000  # the built-in's 49k-token vocabulary takes ~2 s alone, more on a busy machine


@pytest.fixture
def model_file(make_synthetic, tmp_path: Path) -> Path:
    target = tmp_path / "downloads" / "tiny-llama.gguf"
    target.parent.mkdir()
    shutil.copyfile(make_synthetic("llama", "F16", vocab_size=256), target)
    return target


@pytest.fixture
def library():
    with ModelLibrary() as lib:
        yield lib


@pytest.fixture
def dialog(qtbot, library: ModelLibrary) -> ModelManager:
    manager = ModelManager(library)
    qtbot.addWidget(manager)
    manager.show()
    return manager


def cell(manager: ModelManager, row: int, column: int) -> str:
    return manager.table.item(row, column).text()


def details(manager: ModelManager) -> dict[str, str]:
    table = manager.details
    return {table.item(r, 0).text(): table.item(r, 1).text() for r in range(table.rowCount())}


def shown_details(qtbot, manager: ModelManager) -> dict[str, str]:
    """The details pane once the worker has read the selected model's file."""
    qtbot.waitUntil(lambda: details(manager).get(READING_ROW) != READING_PENDING, timeout=READ_MS)
    return details(manager)


def import_now(qtbot, manager: ModelManager, *paths: Path) -> None:
    with qtbot.waitSignal(manager.import_done, timeout=READ_MS):
        manager.import_files(list(paths))


def file_mime(*paths: Path, web: str | None = None) -> QMimeData:
    mime = QMimeData()
    urls = [QUrl.fromLocalFile(str(path)) for path in paths]
    mime.setUrls(urls + ([QUrl(web)] if web else []))
    return mime


def drop(manager: ModelManager, mime: QMimeData) -> bool:
    """Drag the data onto the dialog and drop it, as Qt delivers a real drag; was it accepted?"""
    point = QPointF(10, 10)
    actions, buttons = Qt.DropAction.CopyAction, Qt.MouseButton.LeftButton
    enter = QDragEnterEvent(point.toPoint(), actions, mime, buttons, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(manager, enter)
    if not enter.isAccepted():
        return False
    dropped = QDropEvent(point, actions, mime, buttons, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(manager, dropped)
    return dropped.isAccepted()


def answer_next_message_box(choice: str, tick_delete: bool = False) -> dict[str, object]:
    """When the confirmation opens, note what it offers, tick (or not) its box, press a button.

    Checks are made by the caller on the returned notes, after the box has
    closed: an assertion inside the timer would leave the modal box open forever.
    """
    seen: dict[str, object] = {}
    tries = iter(range(200))  # ~2 s, then stop: a box that never came must not haunt later tests

    def answer() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            if next(tries, None) is not None:
                QTimer.singleShot(10, answer)
            return
        seen.update(text=box.checkBox().text(), ticked=box.checkBox().isChecked())
        box.checkBox().setChecked(tick_delete)
        yes, cancel = QMessageBox.StandardButton.Yes, QMessageBox.StandardButton.Cancel
        box.button(yes if choice == "yes" else cancel).click()

    QTimer.singleShot(0, answer)
    return seen


UNTICKED_OFFER = {"text": "Also delete the file from disk", "ticked": False}


def pick_files(monkeypatch: pytest.MonkeyPatch, *paths: Path) -> None:
    names = [str(path) for path in paths]
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: (names, ""))
    if paths:
        monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (names[0], ""))


# -- showing -----------------------------------------------------------------------------------


def test_the_builtin_model_is_listed_with_its_details_and_breakdown(
    qtbot, dialog: ModelManager
) -> None:
    assert dialog.windowTitle() == "Models" and dialog.table.rowCount() == 1
    assert cell(dialog, 0, NAME).endswith("(built-in)")
    assert (cell(dialog, 0, SIZE), cell(dialog, 0, KIND)) == ("93.8 MiB", "dense")
    assert cell(dialog, 0, DEFAULT) == "default" and cell(dialog, 0, STATUS) == ""
    shown = shown_details(qtbot, dialog)
    assert shown["Architecture"] == "llama" and shown["File size"] == "93.8 MiB"
    assert shown["Context length"] == "8,192 tokens" and shown["Parameters"] == "134.5M"
    breakdown = dialog.breakdown
    first = [breakdown.item(0, column).text() for column in range(3)]
    assert first == ["Feed-forward (dense)", "47.5 MiB", "52%"] and breakdown.rowCount() == 4
    assert not dialog.remove_button.isEnabled() and not dialog.pair_button.isEnabled()
    assert not dialog.default_button.isEnabled() and dialog.load_button.isEnabled()


def test_every_control_has_an_accessible_name(dialog: ModelManager) -> None:
    controls = [*dialog._action_buttons(), dialog.table, dialog.details, dialog.breakdown,
                dialog.message, dialog.close_buttons]  # fmt: skip
    names = [control.accessibleName() for control in controls]
    assert all(names) and len(set(names)) == len(names)
    assert dialog.import_button.accessibleName() == "Import GGUF"


class RecordingReader:
    """The real inventory reader, noting the thread of each call; a gated path waits first."""

    def __init__(self, gated: tuple[Path, ...] = ()) -> None:
        self.calls: list[tuple[Path, threading.Thread]] = []
        self.gates = {path.resolve(): threading.Event() for path in gated}
        self.started: set[Path] = set()

    def __call__(self, path: Path) -> ModelInventory:
        resolved = Path(path).resolve()
        self.calls.append((resolved, threading.current_thread()))
        self.started.add(resolved)
        gate = self.gates.get(resolved)
        if gate is not None:
            gate.wait(timeout=READ_MS / 1000)  # a failing test must not hang the worker
        return read_inventory(path)

    def open_all(self) -> None:
        for gate in self.gates.values():
            gate.set()

    def paths(self) -> list[Path]:
        return [path for path, _thread in self.calls]


def open_manager(qtbot, library: ModelLibrary, reader: Callable[[Path], ModelInventory]):
    manager = ModelManager(library, read_inventory=reader)
    qtbot.addWidget(manager)
    manager.show()
    return manager


def test_models_are_read_off_the_gui_thread_for_details_and_import(
    qtbot, library: ModelLibrary, model_file: Path
) -> None:
    reader = RecordingReader()
    manager = open_manager(qtbot, library, reader)
    builtin = default_model_path().resolve()
    assert shown_details(qtbot, manager)["Parameters"] == "134.5M"
    import_now(qtbot, manager, model_file)
    assert details(manager)["File"] == str(model_file.resolve())
    assert reader.paths().count(builtin) == 1 and reader.paths().count(model_file.resolve()) == 1
    gui_thread = threading.current_thread()
    assert all(thread is not gui_thread for _path, thread in reader.calls)


def test_the_pane_says_it_is_reading_and_a_stale_reading_is_not_shown(
    qtbot, library: ModelLibrary, model_file: Path
) -> None:
    library.add(model_file)
    builtin = default_model_path().resolve()
    reader = RecordingReader(gated=(builtin, model_file))
    try:
        manager = open_manager(qtbot, library, reader)  # the built-in, selected, is being read
        qtbot.waitUntil(lambda: builtin in reader.started, timeout=READ_MS)
        assert details(manager) == {READING_ROW: READING_PENDING, "File": str(builtin)}
        assert manager.breakdown.rowCount() == 0
        manager.table.selectRow(1)  # the user moves on before the built-in is read
        waiting = {READING_ROW: READING_PENDING, "File": str(model_file.resolve())}
        assert details(manager) == waiting
        with qtbot.waitSignal(manager._inventory_read, timeout=READ_MS) as stale:
            reader.gates[builtin].set()
        assert stale.args[0].builtin  # the built-in's reading came back, and was not drawn
        assert details(manager) == waiting and manager.breakdown.rowCount() == 0
        reader.open_all()
        shown = shown_details(qtbot, manager)
    finally:
        reader.open_all()
    assert shown["File"] == str(model_file.resolve()) and shown["Parameters"] != "134.5M"
    assert manager.breakdown.rowCount() > 0


def test_a_model_read_once_is_shown_at_once_when_selected_again(
    qtbot, library: ModelLibrary, model_file: Path
) -> None:
    library.add(model_file)
    reader = RecordingReader()
    manager = open_manager(qtbot, library, reader)
    assert shown_details(qtbot, manager)["Parameters"] == "134.5M"
    manager.table.selectRow(1)
    assert shown_details(qtbot, manager)["File"] == str(model_file.resolve())
    manager.table.selectRow(0)  # no waiting: drawn from the cache, in this very call
    assert details(manager)["Parameters"] == "134.5M" and manager.breakdown.rowCount() == 4
    assert len(reader.calls) == 2


# -- importing ---------------------------------------------------------------------------------


def test_import_button_adds_the_chosen_file_and_shows_it(
    qtbot, dialog: ModelManager, model_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pick_files(monkeypatch, model_file)
    with qtbot.waitSignal(dialog.import_done, timeout=READ_MS):
        qtbot.mouseClick(dialog.import_button, Qt.MouseButton.LeftButton)
    assert dialog.table.rowCount() == 2
    assert (cell(dialog, 1, NAME), cell(dialog, 1, KIND)) == ("Tiny Llama", "dense")
    assert dialog.selected().path == model_file.resolve()
    assert details(dialog)["Architecture"] == "llama"  # read by the import: shown at once
    assert details(dialog)["File"] == str(model_file.resolve())
    assert "tiny-llama imported" in dialog.message.text()
    with ModelLibrary() as reopened:
        assert reopened.find(model_file) is not None
    with qtbot.waitSignal(dialog.import_done, timeout=READ_MS):
        qtbot.mouseClick(dialog.import_button, Qt.MouseButton.LeftButton)
    assert dialog.table.rowCount() == 2 and "already in the list" in dialog.message.text()


def test_dropping_a_non_gguf_file_shows_the_reason_and_changes_nothing(
    qtbot, dialog: ModelManager, library: ModelLibrary, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list\n")
    before = library.models()
    with qtbot.waitSignal(dialog.import_done, timeout=READ_MS):
        assert drop(dialog, file_mime(notes))
    assert "notes.txt: not a GGUF file" in dialog.message.text()
    assert "b00020" in dialog.message.styleSheet()
    assert library.models() == before and dialog.table.rowCount() == 1


def test_dropping_a_model_imports_it_and_a_drag_without_files_is_ignored(
    qtbot, dialog: ModelManager, model_file: Path
) -> None:
    text_only = QMimeData()
    text_only.setText("hello")
    assert not drop(dialog, text_only)
    with qtbot.waitSignal(dialog.import_done, timeout=READ_MS):
        assert drop(dialog, file_mime(model_file))
    assert dialog.table.rowCount() == 2 and dialog.message.styleSheet() == ""


def test_a_projector_dropped_with_its_model_is_paired(
    qtbot, dialog: ModelManager, model_file: Path, tmp_path: Path, write_projector
) -> None:
    projector = write_projector(tmp_path / "mmproj-tiny.gguf")
    with qtbot.waitSignal(dialog.import_done, timeout=READ_MS):
        assert drop(dialog, file_mime(model_file, projector))
    assert cell(dialog, 1, KIND) == "dense + vision"
    assert shown_details(qtbot, dialog)["Vision projector"] == str(projector.resolve())
    assert "Paired mmproj-tiny.gguf with tiny-llama" in dialog.message.text()


def test_a_projector_dropped_alone_is_refused_with_the_reason(
    qtbot, dialog: ModelManager, library: ModelLibrary, tmp_path: Path, write_projector
) -> None:
    projector = write_projector(tmp_path / "mmproj-lonely.gguf")
    with qtbot.waitSignal(dialog.import_done, timeout=READ_MS):
        assert drop(dialog, file_mime(projector))
    assert dialog.message.text() == (
        "mmproj-lonely.gguf is a vision projector (mmproj); pair it with its model instead"
    )
    assert len(library.models()) == 1


# -- projectors, default, loading --------------------------------------------------------------


def test_pair_and_unpair_buttons(
    qtbot,
    dialog: ModelManager,
    model_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_projector,
) -> None:
    import_now(qtbot, dialog, model_file)
    projector = write_projector(tmp_path / "vision.gguf")
    pick_files(monkeypatch, projector)
    qtbot.mouseClick(dialog.pair_button, Qt.MouseButton.LeftButton)
    assert cell(dialog, 1, KIND) == "dense + vision" and dialog.unpair_button.isEnabled()
    qtbot.mouseClick(dialog.unpair_button, Qt.MouseButton.LeftButton)
    assert cell(dialog, 1, KIND) == "dense" and not dialog.unpair_button.isEnabled()
    assert "Vision projector" not in shown_details(qtbot, dialog)


def test_pairing_a_model_as_projector_is_refused(
    qtbot, dialog: ModelManager, model_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import_now(qtbot, dialog, model_file)
    pick_files(monkeypatch, model_file)
    qtbot.mouseClick(dialog.pair_button, Qt.MouseButton.LeftButton)
    assert "tiny-llama.gguf is not a vision projector" in dialog.message.text()
    assert cell(dialog, 1, KIND) == "dense"


def test_set_as_default_moves_the_mark_and_says_so(
    qtbot, dialog: ModelManager, library: ModelLibrary, model_file: Path
) -> None:
    import_now(qtbot, dialog, model_file)
    with qtbot.waitSignal(dialog.default_changed) as changed:
        qtbot.mouseClick(dialog.default_button, Qt.MouseButton.LeftButton)
    assert changed.args == [str(model_file.resolve())]
    assert (cell(dialog, 0, DEFAULT), cell(dialog, 1, DEFAULT)) == ("", "default")
    assert library.default().path == model_file.resolve()
    assert not dialog.default_button.isEnabled()


def test_load_now_asks_for_the_model_and_its_projector(
    qtbot, dialog: ModelManager, model_file: Path, write_projector
) -> None:
    write_projector(model_file.parent / "mmproj-tiny.gguf")  # paired on import
    import_now(qtbot, dialog, model_file)
    with qtbot.waitSignal(dialog.load_requested) as requested:
        qtbot.mouseClick(dialog.load_button, Qt.MouseButton.LeftButton)
    projector = str((model_file.parent / "mmproj-tiny.gguf").resolve())
    assert requested.args == [str(model_file.resolve()), projector]
    dialog.table.selectRow(0)
    with qtbot.waitSignal(dialog.load_requested) as requested:
        qtbot.mouseClick(dialog.load_button, Qt.MouseButton.LeftButton)
    assert requested.args[1] is None and requested.args[0].endswith(".gguf")


# -- removing ----------------------------------------------------------------------------------


def test_remove_keeps_the_file_unless_the_box_is_ticked(
    qtbot, dialog: ModelManager, library: ModelLibrary, model_file: Path
) -> None:
    import_now(qtbot, dialog, model_file)
    seen = answer_next_message_box("cancel")
    qtbot.mouseClick(dialog.remove_button, Qt.MouseButton.LeftButton)
    assert seen == UNTICKED_OFFER and dialog.table.rowCount() == 2
    seen = answer_next_message_box("yes")
    qtbot.mouseClick(dialog.remove_button, Qt.MouseButton.LeftButton)
    assert seen == UNTICKED_OFFER
    assert dialog.table.rowCount() == 1 and model_file.is_file()
    assert "the file stays on disk" in dialog.message.text()
    import_now(qtbot, dialog, model_file)
    seen = answer_next_message_box("yes", tick_delete=True)
    qtbot.mouseClick(dialog.remove_button, Qt.MouseButton.LeftButton)
    assert seen == UNTICKED_OFFER
    assert dialog.table.rowCount() == 1 and not model_file.exists()
    assert "deleted its file" in dialog.message.text()
    assert library.find(model_file) is None


def test_removing_the_default_hands_the_default_back_to_the_builtin(
    qtbot, dialog: ModelManager, library: ModelLibrary, model_file: Path
) -> None:
    import_now(qtbot, dialog, model_file)
    dialog.set_default()
    answer_next_message_box("yes")
    with qtbot.waitSignal(dialog.default_changed) as changed:
        qtbot.mouseClick(dialog.remove_button, Qt.MouseButton.LeftButton)
    builtin = library.models()[0]
    assert builtin.builtin and changed.args == [str(builtin.path)]
    assert cell(dialog, 0, DEFAULT) == "default"


def test_a_missing_file_is_marked_and_cannot_be_loaded(
    qtbot, dialog: ModelManager, model_file: Path
) -> None:
    import_now(qtbot, dialog, model_file)
    model_file.unlink()
    dialog.refresh()
    assert cell(dialog, 1, STATUS) == "missing" and cell(dialog, 1, SIZE) == "—"
    assert details(dialog)["Status"] == "the file is missing"
    assert not dialog.load_button.isEnabled() and not dialog.default_button.isEnabled()
    assert dialog.remove_button.isEnabled()


# -- ui.model_drop -----------------------------------------------------------------------------


def test_drop_helpers_take_local_files_only(tmp_path: Path) -> None:
    mime = file_mime(tmp_path / "a.gguf", tmp_path / "B.GGUF", tmp_path / "c.txt",
                     web="https://example.org/d.gguf")  # fmt: skip
    assert dropped_paths(mime) == [tmp_path / "a.gguf", tmp_path / "B.GGUF", tmp_path / "c.txt"]
    assert gguf_paths(mime) == [tmp_path / "a.gguf", tmp_path / "B.GGUF"]
    assert dropped_paths(QMimeData()) == []


def test_the_drop_filter_works_on_any_widget(qtbot, tmp_path: Path) -> None:
    widget = QWidget()
    qtbot.addWidget(widget)
    dropper = GgufDropFilter(widget)
    assert widget.acceptDrops()
    with qtbot.waitSignal(dropper.files_dropped) as dropped:
        assert dropper.handle_drop(file_mime(tmp_path / "m.gguf", tmp_path / "x.txt"))
    assert dropped.args == [[tmp_path / "m.gguf", tmp_path / "x.txt"]]
    assert not dropper.handle_drop(QMimeData())


def test_a_gguf_only_filter_lets_other_drops_through(qtbot, tmp_path: Path) -> None:
    widget = QWidget()
    qtbot.addWidget(widget)
    dropper = GgufDropFilter(widget, gguf_only=True)
    assert not dropper.handle_drop(file_mime(tmp_path / "photo.png"))
    with qtbot.waitSignal(dropper.files_dropped) as dropped:
        assert dropper.handle_drop(file_mime(tmp_path / "photo.png", tmp_path / "m.GGUF"))
    assert dropped.args == [[tmp_path / "m.GGUF"]]


# -- the prompt format ---------------------------------------------------------------------------


def test_the_prompt_format_is_shown_chosen_and_stored_per_model(
    qtbot, dialog: ModelManager, library: ModelLibrary, make_synthetic, tmp_path: Path
) -> None:
    gemma = tmp_path / "gemma-like.gguf"
    markers = ("<start_of_turn>", "<end_of_turn>")
    shutil.copyfile(make_synthetic("llama", **marker_vocabulary(markers)), gemma)
    import_now(qtbot, dialog, gemma)
    dialog.refresh(select=gemma.resolve())
    assert dialog.prompt_format.isEnabled() and dialog.prompt_format.currentText() == "auto"
    described = "gemma (no chat template; the vocabulary"
    qtbot.waitUntil(lambda: details(dialog).get("Prompt format", "").startswith(described))
    changes: list[tuple[str, str]] = []
    dialog.prompt_format_changed.connect(lambda path, name: changes.append((path, name)))
    dialog.prompt_format.setCurrentText("completion")
    dialog.prompt_format.activated.emit(dialog.prompt_format.currentIndex())
    assert changes == [(str(gemma.resolve()), "completion")]
    assert library.find(gemma).prompt_format == "completion"  # type: ignore[union-attr]
    completion = "completion (plain text completion, as set)"
    qtbot.waitUntil(lambda: details(dialog).get("Prompt format", "") == completion)
    dialog.refresh(select=library.models()[0].path)  # the built-in keeps its own template
    assert not dialog.prompt_format.isEnabled()
    own = "template (the model's own chat template)"
    qtbot.waitUntil(lambda: details(dialog).get("Prompt format", "") == own)
