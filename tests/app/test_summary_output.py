"""Summary files mirror the input tree; reports are complete, atomic and escape odd names."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from app.stores.atomic_files import remove_leftovers, write_text_atomic
from app.stores.job_store import DONE, SKIPPED, FileRecord
from app.summaries.summary_output import summary_path, write_reports, write_summary


def test_summaries_mirror_the_tree_and_keep_the_whole_name(tmp_path: Path) -> None:
    out = tmp_path / "out"
    a = write_summary(out, "notes/a.txt", "Short summary.", "12 characters")
    b = write_summary(out, "notes/a.md", "Another.", "8 characters")
    assert a == out / "notes" / "a.txt.md" and b == out / "notes" / "a.md"  # one extension
    assert a.read_text().startswith("# notes/a.txt\n\nShort summary.")
    assert summary_path(out, "notes/a.txt") == a
    assert summary_path(out, "READ.ME.MD") == out / "READ.ME.MD"


def test_a_markdown_input_named_as_another_inputs_summary_keeps_the_added_extension(
    tmp_path: Path,
) -> None:
    inputs = {"x.txt", "x.txt.md"}
    assert summary_path(tmp_path, "x.txt", inputs) == tmp_path / "x.txt.md"
    assert summary_path(tmp_path, "x.txt.md", inputs) == tmp_path / "x.txt.md.md"


def test_summaries_and_reports_get_the_users_umask_not_0600(tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        summary = write_summary(tmp_path, "a.txt", "Short.", "6 characters")
        write_reports(tmp_path, tmp_path / "in", [FileRecord("a.txt", DONE)])
    finally:
        os.umask(previous)
    for path in (summary, tmp_path / "report.json", tmp_path / "report.md"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o640, path


def test_reports_list_every_file_with_its_outcome(tmp_path: Path) -> None:
    records = [
        FileRecord("a|b.txt", DONE, None, 300, 80, 30, 2.25, note="it began to loop"),
        FileRecord("img.png", SKIPPED, error="binary file (PNG image)"),
    ]
    write_reports(tmp_path, tmp_path / "in", records)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["counts"] == {"done": 1, "skipped": 1}
    assert data["files"][0] == {
        "file": "a|b.txt", "status": "done", "pages": None, "characters": 300,
        "tokens_in": 80, "tokens_out": 30, "seconds": 2.25, "error": None,
        "note": "it began to loop",
    }  # fmt: skip
    markdown = (tmp_path / "report.md").read_text()
    assert "| a\\|b.txt | done |" in markdown and "binary file (PNG image)" in markdown
    assert "it began to loop" in markdown


def test_a_killed_writer_leaves_only_a_temp_file_which_is_cleared(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "x.md"
    target.parent.mkdir()
    write_text_atomic(target, "whole")
    (target.parent / ".x.md.abc123.tmp").write_text("hal")  # what a kill mid-write leaves
    assert remove_leftovers(tmp_path) == 1
    assert [p.name for p in target.parent.iterdir()] == ["x.md"]
    assert target.read_text() == "whole"
