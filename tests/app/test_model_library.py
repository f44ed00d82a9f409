"""The model list: importing real GGUF files, refusing bad ones, projectors, default, removal.

Models are small synthetic GGUFs without a tokenizer (their inventory reads in
milliseconds), copied into per-test folders; projectors are real CLIP GGUFs.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from app.paths import app_paths
from app.screen_text.model_summary import SizeShare, quant_text, summarize
from app.stores.model_files import kind_label
from app.stores.model_library import APPLICATION_ID, STORE_FILE_NAME, ModelLibrary
from engine.errors import BadInputError, ModelFileError
from engine.model.inventory import read_inventory

PROJECTOR_REFUSAL = "is a vision projector (mmproj); pair it with its model instead"


@pytest.fixture
def small_llama(make_synthetic) -> Path:
    return make_synthetic("llama", "F16", vocab_size=256)


@pytest.fixture
def place_model(tmp_path: Path, small_llama: Path):
    """Copy the small model to tmp_path/<folder>/<name> and return the copy's path."""

    def place(folder: str, name: str = "tiny-llama.Q8.gguf") -> Path:
        target = tmp_path / folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(small_llama, target)
        return target

    return place


@pytest.fixture
def library():
    with ModelLibrary() as lib:
        yield lib


def paths_of(lib: ModelLibrary) -> list[Path]:
    return [entry.path for entry in lib.models()]


# -- adding and listing ------------------------------------------------------------------------


def test_a_fresh_list_holds_only_the_builtin_model_as_default(
    library: ModelLibrary, default_model_file: Path
) -> None:
    [builtin] = library.models()
    assert builtin.builtin and builtin.is_default and builtin.exists
    assert builtin.path == default_model_file.resolve()
    assert (builtin.architecture, builtin.kind) == ("llama", "dense")
    assert builtin.file_bytes == default_model_file.stat().st_size
    assert builtin.name == "SmolLM2-135M-Instruct.Q4_1"  # the file's own name
    assert builtin.readable_name == "SmolLM2 135M Instruct · Q4_1"
    assert library.default() == builtin
    assert library.path == app_paths().data_dir / STORE_FILE_NAME


def test_an_added_model_is_listed_and_survives_reopening(place_model) -> None:
    model = place_model("downloads")
    with ModelLibrary() as lib:
        added = lib.add(model)
    assert (added.path, added.name, added.architecture, added.kind) == (
        model.resolve(), "tiny-llama.Q8", "llama", "dense"
    )  # fmt: skip
    assert added.exists and added.file_bytes == model.stat().st_size and added.added_at
    assert not added.builtin and not added.is_default and added.mmproj_path is None
    with ModelLibrary() as reopened:
        assert [e.path for e in reopened.models()][1:] == [model.resolve()]
        assert reopened.find(model) == added
        conn = sqlite3.connect(reopened.path)
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        conn.close()


def test_adding_the_same_file_again_returns_the_existing_entry(
    library: ModelLibrary, place_model, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = place_model("m")
    first = library.add(model)
    monkeypatch.chdir(model.parent)
    assert library.add(Path("..") / "m" / model.name) == first
    assert library.add(Path(model.name)) == first
    assert len(library.models()) == 2


def test_adding_the_builtin_model_returns_the_builtin_entry(
    library: ModelLibrary, default_model_file: Path
) -> None:
    entry = library.add(default_model_file)
    assert entry.builtin and len(library.models()) == 1


@pytest.mark.parametrize(
    ("make_bad_file", "reason"),
    [
        (lambda d: _write(d / "x.gguf", b"this is a text file, not a model\n"), "not a GGUF file"),
        (lambda d: _write(d / "empty.gguf", b""), "file is empty"),
        (lambda d: d / "nowhere.gguf", "no such file"),
        (lambda d: d, "is a directory"),
    ],
    ids=["text-named-gguf", "empty", "missing", "directory"],
)
def test_an_unusable_file_is_refused_with_its_reason_and_nothing_changes(
    library: ModelLibrary, tmp_path: Path, make_bad_file, reason: str
) -> None:
    before = library.models()
    bad = make_bad_file(tmp_path)
    with pytest.raises(ModelFileError, match=reason) as refused:
        library.add(bad)
    assert "\n" not in str(refused.value)
    assert library.models() == before


def test_a_truncated_gguf_is_refused(library: ModelLibrary, small_llama: Path, tmp_path: Path):
    cut = _write(tmp_path / "cut.gguf", small_llama.read_bytes()[: small_llama.stat().st_size // 2])
    with pytest.raises(ModelFileError, match="truncated"):
        library.add(cut)
    assert len(library.models()) == 1


def test_a_vision_projector_is_refused_as_a_model(
    library: ModelLibrary, tmp_path: Path, write_projector
) -> None:
    projector = write_projector(tmp_path / "mmproj-gemma3.gguf")
    with pytest.raises(BadInputError) as refused:
        library.add(projector)
    assert str(refused.value) == f"mmproj-gemma3.gguf {PROJECTOR_REFUSAL}"
    assert len(library.models()) == 1


# -- vision projectors -------------------------------------------------------------------------


def test_a_projector_is_paired_unpaired_and_the_pairing_persists(
    place_model, tmp_path: Path, write_projector
) -> None:
    model = place_model("models")
    projector = write_projector(tmp_path / "elsewhere-vision.gguf")
    with ModelLibrary() as lib:
        lib.add(model)
        paired = lib.pair_projector(model, projector)
    assert paired.mmproj_path == projector.resolve() and paired.mmproj_exists
    assert paired.kind_text == "dense + vision"
    with ModelLibrary() as lib:
        assert lib.find(model).mmproj_path == projector.resolve()
        unpaired = lib.unpair_projector(model)
    assert unpaired.mmproj_path is None and unpaired.kind_text == "dense"
    assert projector.is_file()


def test_pairing_refuses_a_file_that_is_not_a_projector(
    library: ModelLibrary, place_model, tmp_path: Path
) -> None:
    model = place_model("a")
    other_model = place_model("b", "another.gguf")
    library.add(model)
    before = library.models()
    with pytest.raises(BadInputError, match="another.gguf is not a vision projector"):
        library.pair_projector(model, other_model)
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        library.pair_projector(model, _write(tmp_path / "mmproj.gguf", b"hello"))
    assert library.models() == before


def test_pairing_needs_a_listed_model_and_not_the_builtin(
    library: ModelLibrary, place_model, default_model_file: Path, tmp_path: Path, write_projector
) -> None:
    projector = write_projector(tmp_path / "mmproj.gguf")
    with pytest.raises(BadInputError, match="is not in the model list"):
        library.pair_projector(place_model("x"), projector)
    with pytest.raises(BadInputError, match="the built-in model takes no vision projector"):
        library.pair_projector(default_model_file, projector)
    assert len(library.models()) == 1


def test_a_lone_projector_beside_the_model_is_paired_on_import(
    library: ModelLibrary, place_model, write_projector
) -> None:
    model = place_model("gemma-vision", "gemma-3-4b-it-Q4_K_M.gguf")
    projector = write_projector(model.parent / "mmproj-gemma-3-4b-it-f16.gguf")
    entry = library.add(model)
    assert entry.mmproj_path == projector.resolve() and entry.kind_text == "dense + vision"


def test_no_automatic_pairing_with_two_projectors_or_a_fake_one(
    library: ModelLibrary, place_model, write_projector
) -> None:
    two = place_model("two")
    write_projector(two.parent / "mmproj-f16.gguf")
    write_projector(two.parent / "mmproj-f32.gguf")
    fake = place_model("fake")
    _write(fake.parent / "mmproj-model.gguf", b"not a projector")
    assert library.add(two).mmproj_path is None
    assert library.add(fake).mmproj_path is None


# -- the default -------------------------------------------------------------------------------


def test_the_chosen_default_persists_and_the_builtin_can_be_chosen_again(
    place_model, default_model_file: Path
) -> None:
    first, second = place_model("one"), place_model("two")
    with ModelLibrary() as lib:
        lib.add(first)
        lib.add(second)
        lib.set_default(first)
        chosen = lib.set_default(second)
    assert chosen.is_default
    with ModelLibrary() as lib:
        assert lib.default().path == second.resolve()
        assert [e.path for e in lib.models() if e.is_default] == [second.resolve()]
        back = lib.set_default(default_model_file)
        assert back.builtin and back.is_default and lib.default() == back
        assert sum(e.is_default for e in lib.models()) == 1


def test_setting_an_unlisted_file_as_default_is_refused(library: ModelLibrary, place_model):
    with pytest.raises(BadInputError, match="is not in the model list"):
        library.set_default(place_model("x"))
    assert library.default().builtin


# -- removal -----------------------------------------------------------------------------------


def test_removal_keeps_the_file_unless_asked_and_resets_the_default(
    library: ModelLibrary, place_model
) -> None:
    kept, deleted = place_model("kept"), place_model("deleted")
    library.add(kept)
    library.add(deleted)
    library.set_default(kept)
    removed = library.remove(kept)
    assert kept.is_file() and not removed.file_deleted and removed.default_reset
    assert library.default().builtin
    gone = library.remove(deleted, delete_file=True)
    assert not deleted.exists() and gone.file_deleted and not gone.default_reset
    assert len(library.models()) == 1


def test_the_builtin_model_cannot_be_removed(
    library: ModelLibrary, default_model_file: Path
) -> None:
    with pytest.raises(BadInputError, match="the built-in model cannot be removed"):
        library.remove(default_model_file, delete_file=True)
    assert default_model_file.is_file() and library.models()[0].builtin


def test_a_file_that_cannot_be_deleted_stays_listed(library: ModelLibrary, place_model) -> None:
    model = place_model("stuck")
    library.add(model)
    model.unlink()
    model.mkdir()  # unlink() of a folder fails, as a locked file would on Windows
    with pytest.raises(BadInputError, match="cannot delete"):
        library.remove(model, delete_file=True)
    assert library.find(model) is not None


# -- missing files -----------------------------------------------------------------------------


def test_a_vanished_model_stays_listed_as_missing_and_the_default_falls_back(
    library: ModelLibrary, place_model, tmp_path: Path, write_projector
) -> None:
    model = place_model("usb-disk")
    projector = write_projector(tmp_path / "mmproj.gguf")
    library.add(model)
    library.pair_projector(model, projector)
    library.set_default(model)
    model.unlink()
    projector.unlink()
    entry = library.find(model)
    assert entry is not None and entry.is_default
    assert not entry.exists and entry.file_bytes is None and not entry.mmproj_exists
    assert library.default().builtin
    with pytest.raises(BadInputError, match="is missing"):
        library.set_default(model)
    assert not library.remove(model, delete_file=True).file_deleted
    assert len(library.models()) == 1


# -- what the manager shows (app.screen_text.model_summary) -------------------------------


def test_summary_of_a_dense_model(default_model_file: Path) -> None:
    inventory = read_inventory(default_model_file)
    summary = summarize(inventory)
    facts = dict(summary.facts())
    assert facts["Architecture"] == "llama" and facts["Kind"] == "dense"
    assert facts["Parameters"] == "134.5M" and facts["File size"] == "93.8 MiB"
    assert facts["Context length"] == "8,192 tokens" and facts["Layers"] == "30"
    assert facts["Quantisation"] == "Q4_1 69% · Q8_0 31% · F32 <1%"
    labels = [share.label for share in summary.breakdown]
    assert labels == ["Feed-forward (dense)", "Token embedding", "Attention", "Output norm"]
    assert sum(share.n_bytes for share in summary.breakdown) == inventory.tensor_bytes
    assert summary.breakdown[0].size_text == "47.5 MiB"
    assert summary.breakdown[0].percent_text == "52%"


def test_summary_names_moe_and_projector_kinds(
    make_synthetic, tmp_path: Path, write_projector
) -> None:
    moe = read_inventory(make_synthetic("qwen3moe", "F16", vocab_size=256))
    assert kind_label(moe) == "MoE 4×2"
    moe_parts = [share.label for share in summarize(moe).breakdown]
    assert {"Routed experts", "MoE router"} <= set(moe_parts)
    assert "Feed-forward (dense)" not in moe_parts
    projector = read_inventory(write_projector(tmp_path / "mmproj.gguf"))
    assert kind_label(projector) == "vision projector (gemma3)"
    parts = summarize(projector).breakdown  # two equal parts: ordered by label
    assert [(s.label, s.percent_text) for s in parts] == [
        ("Vision encoder", "50%"), ("Vision projector", "50%")
    ]  # fmt: skip
    assert "Output head" not in dict(summarize(projector).facts())


def test_quant_text_folds_the_smallest_types_into_other() -> None:
    mix = tuple(SizeShare(name, 10, 0.2) for name in ("Q4_K", "Q6_K", "Q8_0", "F16", "F32"))
    assert quant_text(mix) == "Q4_K 20% · Q6_K 20% · Q8_0 20% · F16 20% · other 20%"
    assert quant_text(()) == "no tensors"


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
