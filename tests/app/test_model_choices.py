"""The picker's entries, read from a real model list (SQLite) over real GGUF files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.screen_text.model_choices import PickerEntry, model_bytes, picker_entries
from app.screen_text.units import format_bytes
from app.stores.model_library import ModelLibrary
from tests.synthetic_vision import language_model_for, write_synthetic_vlm

DEFAULT_NAME = "SmolLM2 135M Instruct · Q4_1"


@pytest.fixture(scope="module")
def vision_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A synthetic Gemma 3 model and its projector, written once for the module (a small
    vocabulary, so the library reads it in milliseconds)."""
    return write_synthetic_vlm(tmp_path_factory.mktemp("vlm"), language_model_for(vocab_size=256))


@pytest.fixture
def library(tmp_path: Path):
    with ModelLibrary(tmp_path / "models.sqlite3") as lib:
        yield lib


@pytest.fixture
def placed_pair(tmp_path: Path, vision_pair: tuple[Path, Path]) -> tuple[Path, Path]:
    """The pair copied into this test's own folder, as a download would lie."""
    folder = tmp_path / "downloads"
    folder.mkdir()
    model, projector = (Path(shutil.copy(path, folder / path.name)) for path in vision_pair)
    return model, projector


def test_a_fresh_list_offers_the_default_model_alone(
    library: ModelLibrary, default_model_file: Path
) -> None:
    [entry] = picker_entries(library, str(default_model_file))
    assert entry == PickerEntry(
        path=str(default_model_file.resolve()),
        name=DEFAULT_NAME,
        size_bytes=default_model_file.stat().st_size,
        sees_images=False,
        is_default=True,
        mmproj=None,
    )
    assert entry.label == f"{DEFAULT_NAME} · {format_bytes(default_model_file.stat().st_size)}"


def test_an_imported_vision_model_sees_images_until_its_projector_goes(
    library: ModelLibrary, default_model_file: Path, placed_pair: tuple[Path, Path]
) -> None:
    model, projector = placed_pair
    library.add(model)  # the lone projector beside it is paired
    default, vision = picker_entries(library, default_model_file)
    assert default.name == DEFAULT_NAME and default.is_default
    assert vision.path == str(model.resolve()) and not vision.is_default
    assert vision.name == "Synthetic Gemma3 2L 64d · F16"
    assert vision.sees_images and vision.mmproj == str(projector.resolve())
    assert vision.label.endswith(" · sees images")
    assert vision.size_bytes == model.stat().st_size  # the projector is not counted

    projector.unlink()
    [_, blind] = picker_entries(library, default_model_file)
    assert not blind.sees_images and blind.mmproj is None
    assert "sees images" not in blind.label


def test_the_default_mark_follows_the_library_and_missing_files_are_left_out(
    library: ModelLibrary, default_model_file: Path, placed_pair: tuple[Path, Path]
) -> None:
    model, _ = placed_pair
    library.add(model)
    library.set_default(model)
    marks = {entry.path: entry.is_default for entry in picker_entries(library, default_model_file)}
    assert marks == {str(default_model_file.resolve()): False, str(model.resolve()): True}

    model.unlink()  # listed still (an unplugged disk), but nothing to load
    [only] = picker_entries(library, default_model_file)
    assert only.path == str(default_model_file.resolve())


def test_each_file_is_offered_once_however_its_path_is_spelt(
    library: ModelLibrary, default_model_file: Path, tmp_path: Path
) -> None:
    link = tmp_path / "link.gguf"
    link.symlink_to(default_model_file)
    roundabout = default_model_file.parent / ".." / default_model_file.parent.name
    for spelling in (link, roundabout / default_model_file.name):
        assert [e.path for e in picker_entries(library, spelling)] == [
            str(default_model_file.resolve())
        ]
    library.add(link)  # the built-in under another name: still one entry
    assert len(picker_entries(library, default_model_file)) == 1


def test_a_default_model_the_library_does_not_list_comes_first(
    library: ModelLibrary, default_model_file: Path, placed_pair: tuple[Path, Path]
) -> None:
    model, _ = placed_pair
    entries = picker_entries(library, model)
    assert [e.path for e in entries] == [str(model.resolve()), str(default_model_file.resolve())]
    assert [e.is_default for e in entries] == [False, True]  # the library's default keeps its mark
    assert entries[0].name == "Synthetic Gemma3 2L 64d · F16" and not entries[0].sees_images


def test_a_split_model_counts_every_part(
    library: ModelLibrary, default_model_file: Path, tmp_path: Path, make_synthetic
) -> None:
    # A split model as published: part 1 carries the header (here a whole model), the rest
    # carry tensors; only their sizes matter for the picker.
    first = tmp_path / "Llama-3.3-70B-Instruct-Q8_0-00001-of-00002.gguf"
    shutil.copyfile(make_synthetic("llama", "F16", vocab_size=256), first)
    whole = first.stat().st_size
    second = first.with_name("Llama-3.3-70B-Instruct-Q8_0-00002-of-00002.gguf")
    second.write_bytes(b"\0" * 12345)
    library.add(first)
    split = picker_entries(library, default_model_file)[1]
    assert split.name == "Llama 3.3 70B Instruct · Q8_0"  # no "00001-of-00002"
    assert split.size_bytes == whole + 12345
    second.unlink()  # a part still downloading counts for what is there
    assert model_bytes(first) == whole
