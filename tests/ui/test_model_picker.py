"""The chat window's model picker, driven as a user would: clicks in its list, keys, the wheel.

Its entries come from a real model list (SQLite in the test's folder) over real
GGUF files: the embedded default model and a synthetic vision model with its
projector.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication

from app.screen_text.model_choices import PickerEntry, picker_entries
from app.stores.model_library import ModelLibrary
from tests.synthetic_vision import language_model_for, write_synthetic_vlm
from ui.models.model_picker import MANAGE_TEXT, ModelPicker

DEFAULT_NAME = "SmolLM2 135M Instruct · Q4_1"
VISION_NAME = "Synthetic Gemma3 2L 64d · F16"


@pytest.fixture(scope="module")
def vision_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_synthetic_vlm(tmp_path_factory.mktemp("vlm"), language_model_for(vocab_size=256))


@pytest.fixture
def entries(tmp_path: Path, default_model_file: Path, vision_pair) -> list[PickerEntry]:
    folder = tmp_path / "downloads"
    folder.mkdir()
    model, _ = (Path(shutil.copy(path, folder / path.name)) for path in vision_pair)
    with ModelLibrary(tmp_path / "models.sqlite3") as library:
        library.add(model)  # pairs the projector beside it
        return picker_entries(library, default_model_file)


@pytest.fixture
def picker(qtbot, entries: list[PickerEntry]) -> ModelPicker:
    widget = ModelPicker()
    qtbot.addWidget(widget)
    widget.show()
    qtbot.waitExposed(widget)
    widget.show_entries(entries, entries[0].path)
    return widget


def choose(qtbot, picker: ModelPicker, row: int) -> None:
    """Open the list and click a row, as a user picks an item."""
    picker.showPopup()
    view = picker.view()
    qtbot.waitUntil(view.isVisible)
    rect = view.visualRect(view.model().index(row, 0))
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.waitUntil(lambda: not view.isVisible())


def texts(picker: ModelPicker) -> list[str]:
    return [picker.itemText(row) for row in range(picker.count())]


def test_it_lists_each_model_with_size_and_sight_then_the_way_to_get_more(
    picker: ModelPicker, entries: list[PickerEntry]
) -> None:
    default, vision = entries
    assert texts(picker) == [default.label, vision.label, "", MANAGE_TEXT]  # "" the separator
    assert texts(picker)[0].startswith(f"{DEFAULT_NAME} · ") and "MiB" in texts(picker)[0]
    assert texts(picker)[1].startswith(f"{VISION_NAME} · ")
    assert texts(picker)[1].endswith(" · sees images")
    assert picker.accessibleName() == "Model"
    assert picker.view().accessibleName()  # the open list is read out too
    assert picker.currentText() == default.label and picker.current_entry() == default
    assert "(the default model)" in picker.itemData(0, Qt.ItemDataRole.ToolTipRole)


def test_choosing_another_model_asks_for_it_with_its_projector(
    qtbot, picker: ModelPicker, entries: list[PickerEntry]
) -> None:
    vision = entries[1]
    with qtbot.waitSignal(picker.model_chosen) as chosen:
        choose(qtbot, picker, 1)
    assert chosen.args == [vision.path, vision.mmproj] and vision.mmproj is not None
    assert picker.current_entry() == vision
    with qtbot.waitSignal(picker.model_chosen) as back:
        choose(qtbot, picker, 0)
    assert back.args == [entries[0].path, None]


def test_choosing_the_loaded_model_again_loads_nothing(qtbot, picker: ModelPicker) -> None:
    with qtbot.assertNotEmitted(picker.model_chosen):
        choose(qtbot, picker, 0)
        QApplication.processEvents()


def test_the_last_item_asks_for_the_model_manager_and_keeps_the_loaded_model_shown(
    qtbot, picker: ModelPicker, entries: list[PickerEntry]
) -> None:
    with (
        qtbot.assertNotEmitted(picker.model_chosen),
        qtbot.waitSignal(picker.manage_requested),
    ):
        choose(qtbot, picker, picker.count() - 1)
    assert picker.current_entry() == entries[0] and picker.currentText() == entries[0].label


def test_redrawing_selects_the_loaded_model_without_a_word(
    qtbot, picker: ModelPicker, entries: list[PickerEntry]
) -> None:
    default, vision = entries
    with (
        qtbot.assertNotEmitted(picker.model_chosen),
        qtbot.assertNotEmitted(picker.currentIndexChanged),
    ):
        picker.show_entries(entries, vision.path)
        assert picker.current_entry() == vision
        picker.show_entries([default], default.path)
        assert texts(picker) == [default.label, "", MANAGE_TEXT]
        picker.show_entries(entries, "/nowhere/else.gguf")  # loaded from outside the list
        assert picker.current_entry() is None and picker.currentIndex() == -1
        picker.select_path(str(Path(vision.path).parent / ".." / Path(vision.path).parent.name
                               / Path(vision.path).name))  # fmt: skip
        assert picker.current_entry() == vision
    picker.show_entries([], None)
    assert texts(picker) == [MANAGE_TEXT] and picker.currentIndex() == -1


def test_after_a_redraw_the_shown_model_counts_as_loaded(
    qtbot, picker: ModelPicker, entries: list[PickerEntry]
) -> None:
    picker.show_entries(entries, entries[1].path)
    with qtbot.assertNotEmitted(picker.model_chosen):
        choose(qtbot, picker, 1)
        QApplication.processEvents()
    with qtbot.waitSignal(picker.model_chosen) as chosen:
        choose(qtbot, picker, 0)
    assert chosen.args[0] == entries[0].path


def test_arrow_keys_open_the_list_instead_of_loading_each_model_passed(
    qtbot, picker: ModelPicker, entries: list[PickerEntry]
) -> None:
    picker.setFocus()
    with qtbot.assertNotEmitted(picker.model_chosen):
        qtbot.keyClick(picker, Qt.Key.Key_Down)
        qtbot.waitUntil(picker.view().isVisible)
    assert picker.current_entry() == entries[0]
    with qtbot.waitSignal(picker.model_chosen) as chosen:  # in the list: move, then Enter
        qtbot.keyClick(picker.view(), Qt.Key.Key_Down)
        qtbot.keyClick(picker.view(), Qt.Key.Key_Return)
    assert chosen.args == [entries[1].path, entries[1].mmproj]


def test_the_wheel_does_not_change_the_model(
    qtbot, picker: ModelPicker, entries: list[PickerEntry]
) -> None:
    centre = QPointF(picker.rect().center())
    wheel = QWheelEvent(
        centre, picker.mapToGlobal(centre), QPoint(0, 0), QPoint(0, -120),
        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase,
        False,
    )  # fmt: skip
    with qtbot.assertNotEmitted(picker.model_chosen):
        QApplication.sendEvent(picker, wheel)
    assert picker.current_entry() == entries[0] and not wheel.isAccepted()
