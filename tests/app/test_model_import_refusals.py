"""`models import` and `info` with bad files: the good ones listed, each bad one refused with
its reason, exit 2 when anything was refused, and never a traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.cli import main
from app.stores.model_library import ModelLibrary
from tests.engine.gguf_mutations import VT, rewritten


@pytest.fixture(scope="module")
def tiny(make_synthetic) -> Path:
    return make_synthetic("llama", "F16", vocab_size=256)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_folder_import_lists_the_good_files_and_refuses_each_bad_one(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    good = Path(shutil.copyfile(tiny, folder / "b-good.gguf"))
    typed = rewritten(tiny, folder / "a-typed.gguf", {"llama.block_count": ("2", VT.STRING)})
    unread = rewritten(tiny, folder / "c-no-context.gguf", {"llama.context_length": None})
    (folder / "d-empty.gguf").write_bytes(b"")
    code, out, err = _run(capsys, "models", "import", str(folder))
    assert code == 2
    assert out.split() == [str(good)]
    assert f"refused {typed}: bad model file: llama.block_count is '2', not a whole" in err
    cannot = "llama.cpp cannot load it: error loading model hyperparameters"
    assert f"refused {unread}: {cannot}: key not found in model: llama.context_length" in err
    assert "d-empty.gguf: file is empty" in err
    assert "1 model(s) in the list from 4 file(s), 3 refused" in err
    assert "Traceback" not in err
    with ModelLibrary() as library:
        assert [m.path for m in library.models() if not m.builtin] == [good]


def test_an_import_of_only_good_files_exits_0(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = Path(shutil.copyfile(tiny, tmp_path / "good.gguf"))
    code, out, err = _run(capsys, "models", "import", str(good))
    assert code == 0 and out.split() == [str(good)] and "refused" not in err


def test_info_on_a_bad_value_is_one_line_and_exit_2(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = rewritten(tiny, tmp_path / "bad.gguf", {"llama.expert_used_count": (3, VT.UINT32)})
    code, out, err = _run(capsys, "info", str(bad))
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "expert_used_count (3) exceeds expert_count" in err
