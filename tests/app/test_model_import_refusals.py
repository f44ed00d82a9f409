"""`models import`, `info` and `chat --model` with bad files: the good ones listed, each bad
one refused with its reason, exit 2 when anything was refused, and never a traceback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from app.cli.main import main
from app.stores.model_library import ModelLibrary
from tests.engine.gguf_mutations import VT, patched, rewritten, string_length_at


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


@pytest.fixture(scope="module")
def chatty(make_synthetic) -> Path:
    """A small model with the default model's tokenizer and chat template: one that chats."""
    return make_synthetic("llama", "F16")


WINDOW_AS_TEXT = {
    "llama.attention.sliding_window": (64, VT.UINT32),
    "llama.attention.sliding_window_pattern": ("every 2nd", VT.STRING),
}


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"llama.context_length": (8, VT.UINT32)}, "llama.context_length is 8; it must be"),
        ({"llama.context_length": (2**32 - 1, VT.UINT32)}, "llama.context_length is 4294967295;"),
        ({"general.architecture": None}, "general.architecture is missing"),
        (WINDOW_AS_TEXT, "llama.attention.sliding_window_pattern is 'every 2nd', not a whole"),
    ],
    ids=["context of 8", "context of 2^32 - 1", "no architecture", "window pattern as text"],
)
def test_chat_with_a_bad_value_is_one_line_and_exit_2(
    chatty: Path, tmp_path: Path, shardchat, changes: dict, named: str
) -> None:
    """Each was "internal error: ..." and exit 1 (n_ctx below 16 tokens, a context llama.cpp
    reports as -1, "None.block_count is missing", a ValueError in the inventory)."""
    bad = rewritten(chatty, tmp_path / "bad.gguf", changes)
    run = shardchat("chat", "--model", str(bad), "Hello")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith(f"shardchat: error: {bad}: bad model file: {named}")
    assert run.stderr.count("\n") == 1


def test_info_on_a_chat_template_of_a_gigabyte_is_one_line_and_exit_2(
    chatty: Path, tmp_path: Path, shardchat
) -> None:
    """A 6 GiB file (sparse) whose chat template says 2^30 - 1 bytes: was a MemoryError."""
    at = string_length_at(chatty, "tokenizer.chat_template")
    big = patched(chatty, tmp_path / "big.gguf", at, "<Q", 2**30 - 1)
    os.truncate(big, 6 << 30)
    run = shardchat("info", str(big))
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == (
        f"shardchat: error: {big}: malformed GGUF: absurd string length 1073741823 for "
        f"tokenizer.chat_template (at most {16 << 20} bytes)\n"
    )
