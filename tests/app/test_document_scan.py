"""Scanning a folder for batch summaries, and choosing where the summaries go.

Real folders in tmp_path: nesting, hidden entries, globs, symlink loops and
links in and out of the tree, pipes, odd names, and output folders that must
be refused.
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import pytest

from app.summaries.document_scan import (
    FolderScan,
    Skipped,
    check_output_folder,
    default_output_folder,
    scan_folder,
)
from engine.errors import BadInputError

RUNNING_AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def make_tree(root: Path, files: list[str]) -> Path:
    for relative in files:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"contents of {relative}\n", encoding="utf-8")
    return root


def relative_documents(scan: FolderScan) -> list[str]:
    return [scan.relative(path).as_posix() for path in scan.documents]


def skip_reasons(scan: FolderScan) -> dict[str, str]:
    return {scan.relative(item.path).as_posix(): item.reason for item in scan.skipped}


def bad_input(call, *args: object, **kwargs: object) -> str:
    with pytest.raises(BadInputError) as caught:
        call(*args, **kwargs)
    assert "\n" not in str(caught.value)
    return str(caught.value)


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    return make_tree(
        tmp_path / "notes",
        [
            "b.txt",
            "A.md",
            "sub/deeper/c.py",
            "sub/d.html",
            "drafts/old.txt",
            "logs/run.log",
            ".hidden.txt",
            ".git/config",
            "sub/.cache/x.txt",
        ],
    )


def test_nested_documents_in_stable_order_without_hidden_entries(notes: Path) -> None:
    scan = scan_folder(notes)
    assert scan.folder == notes
    assert relative_documents(scan) == [
        "A.md",
        "b.txt",
        "drafts/old.txt",
        "logs/run.log",
        "sub/d.html",
        "sub/deeper/c.py",
    ]
    assert scan.skipped == []  # hidden entries are a choice, not a problem
    assert all(path.is_absolute() and path.is_file() for path in scan.documents)


def test_hidden_entries_can_be_included(notes: Path) -> None:
    scan = scan_folder(notes, include_hidden=True)
    assert {".hidden.txt", ".git/config", "sub/.cache/x.txt"} <= set(relative_documents(scan))


def test_not_recursive_lists_only_the_top_folder(notes: Path) -> None:
    assert relative_documents(scan_folder(notes, recursive=False)) == ["A.md", "b.txt"]


def test_include_matches_bare_names_anywhere_and_relative_paths(notes: Path) -> None:
    assert relative_documents(scan_folder(notes, include=["*.txt", "*.py"])) == [
        "b.txt",
        "drafts/old.txt",
        "sub/deeper/c.py",
    ]
    assert relative_documents(scan_folder(notes, include=["sub/*.html"])) == ["sub/d.html"]


def test_exclude_prunes_folders_and_files(notes: Path) -> None:
    scan = scan_folder(notes, exclude=["drafts", "*.log", "sub/deeper/*"])
    assert relative_documents(scan) == ["A.md", "b.txt", "sub/d.html"]


def test_an_empty_folder_is_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    scan = scan_folder(tmp_path / "empty")
    assert (scan.documents, scan.skipped) == ([], [])


def test_a_folder_holding_only_hidden_files_gives_nothing(tmp_path: Path) -> None:
    make_tree(tmp_path / "dotfiles", [".bashrc", ".config/app.toml"])
    assert scan_folder(tmp_path / "dotfiles").documents == []


def test_a_missing_path_is_one_clear_error(tmp_path: Path) -> None:
    message = bad_input(scan_folder, tmp_path / "nowhere")
    assert message == f"{tmp_path / 'nowhere'} does not exist"


def test_a_file_instead_of_a_folder_is_one_clear_error(tmp_path: Path) -> None:
    path = make_tree(tmp_path, ["report.txt"]) / "report.txt"
    assert bad_input(scan_folder, path) == (
        f"{path} is a file, not a folder; give the folder that holds it"
    )


@pytest.mark.skipif(RUNNING_AS_ROOT, reason="root reads folders whatever their mode")
def test_an_unreadable_folder_is_an_error_and_an_unreadable_subfolder_is_skipped(
    tmp_path: Path,
) -> None:
    root = make_tree(tmp_path / "root", ["ok.txt", "locked/secret.txt"])
    (root / "locked").chmod(0)
    try:
        scan = scan_folder(root)
        assert relative_documents(scan) == ["ok.txt"]
        assert skip_reasons(scan) == {"locked": "permission denied"}
        root.chmod(0)
        assert bad_input(scan_folder, root).startswith(f"cannot read the folder {root}")
    finally:
        root.chmod(0o700)
        (root / "locked").chmod(0o700)


def test_a_symlink_back_to_an_ancestor_is_a_loop_not_a_hang(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", ["top.txt", "sub/inner.txt"])
    (root / "sub" / "up").symlink_to(root)
    (root / "sub" / "here").symlink_to(root / "sub")
    scan = scan_folder(root)
    assert relative_documents(scan) == ["sub/inner.txt", "top.txt"]
    assert skip_reasons(scan) == {"sub/here": "symlink loop", "sub/up": "symlink loop"}


def test_self_referencing_and_broken_links_are_skipped_with_reasons(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", ["real.txt"])
    (root / "self.txt").symlink_to(root / "self.txt")
    (root / "dangling.txt").symlink_to(root / "never-written.txt")
    scan = scan_folder(root)
    assert relative_documents(scan) == ["real.txt"]
    assert skip_reasons(scan) == {"dangling.txt": "broken symlink", "self.txt": "symlink loop"}


def test_links_out_of_the_tree_are_followed(tmp_path: Path) -> None:
    elsewhere = make_tree(tmp_path / "elsewhere", ["shared.md", "folder/inside.txt"])
    root = make_tree(tmp_path / "root", ["own.txt"])
    (root / "linked.md").symlink_to(elsewhere / "shared.md")
    (root / "linked-folder").symlink_to(elsewhere / "folder")
    scan = scan_folder(root)
    assert relative_documents(scan) == ["linked-folder/inside.txt", "linked.md", "own.txt"]
    assert scan.skipped == []


def test_a_file_or_folder_reached_twice_is_listed_once_under_its_own_path(
    tmp_path: Path,
) -> None:
    root = make_tree(tmp_path / "root", ["b-real/doc.txt", "c.txt"])
    (root / "a-link").symlink_to(root / "b-real")  # sorts before the real folder
    (root / "a.txt").symlink_to(root / "c.txt")
    os.link(root / "c.txt", root / "d-hardlink.txt")
    scan = scan_folder(root)
    assert relative_documents(scan) == ["a.txt", "b-real/doc.txt"]
    assert skip_reasons(scan) == {
        "a-link": "symlink to a folder scanned already",
        "c.txt": "same file as a.txt",
        "d-hardlink.txt": "same file as a.txt",
    }


def test_the_output_folder_inside_the_input_is_never_entered(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", ["doc.txt", "summaries/doc.summary.md"])
    scan = scan_folder(root, output_dir=root / "summaries")
    assert relative_documents(scan) == ["doc.txt"]
    assert scan.skipped == [Skipped(root / "summaries", "the output folder")]


def test_pipes_are_not_documents(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", ["doc.txt"])
    os.mkfifo(root / "pipe")
    scan = scan_folder(root)
    assert relative_documents(scan) == ["doc.txt"]
    assert skip_reasons(scan) == {"pipe": "not a regular file"}


def test_unusual_names_are_found_and_sorted_ignoring_case(tmp_path: Path) -> None:
    names = ["Zebra.txt", "apple.txt", "with space.md", "ünïcødé 文書.txt", "new\nline.txt"]
    root = make_tree(tmp_path / "weird names", names)
    scan = scan_folder(root)
    assert relative_documents(scan) == [
        "apple.txt",
        "new\nline.txt",
        "with space.md",
        "Zebra.txt",
        "ünïcødé 文書.txt",
    ]
    assert all(path.read_text(encoding="utf-8") for path in scan.documents)


def test_a_deep_tree_is_walked_without_recursion(tmp_path: Path) -> None:
    """The recursion limit is lowered below the tree's depth instead of building a tree
    deeper than 1000 levels, which pytest's own tmp_path cleanup could not delete."""
    deepest = tmp_path / "deep" / Path(*["d"] * 300)
    deepest.mkdir(parents=True)
    (deepest / "bottom.txt").write_text("found me", encoding="utf-8")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 100)  # one frame per level would overflow
    try:
        scan = scan_folder(tmp_path / "deep")
    finally:
        sys.setrecursionlimit(limit)
    assert [path.name for path in scan.documents] == ["bottom.txt"]


# --- the output folder ---------------------------------------------------------------


def test_the_default_output_folder_sits_beside_the_input(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "notes", ["a.txt"])
    out = check_output_folder(root)
    assert out == tmp_path / "notes-summaries"
    assert out.is_dir() and list(out.iterdir()) == []  # the write probe left nothing
    assert default_output_folder(f"{root}/sub/..") == out


def test_a_chosen_output_folder_is_created_with_its_parents(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "notes", ["a.txt"])
    out = check_output_folder(root, tmp_path / "reports" / "2025")
    assert out == tmp_path / "reports" / "2025" and out.is_dir()


@pytest.mark.parametrize("inside", [".", "summaries", "sub/deeper/out"])
def test_an_output_folder_inside_the_input_is_refused(tmp_path: Path, inside: str) -> None:
    root = make_tree(tmp_path / "notes", ["a.txt", "sub/deeper/b.txt"])
    message = bad_input(check_output_folder, root, root / inside)
    assert "is inside the input folder" in message and message.endswith("choose one outside it")
    assert not (root / "summaries").exists()


def test_an_output_folder_reaching_inside_through_a_link_is_refused(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "notes", ["a.txt"])
    (tmp_path / "shortcut").symlink_to(root)
    assert "is inside the input folder" in bad_input(
        check_output_folder, root, tmp_path / "shortcut" / "out"
    )


def test_an_output_folder_that_cannot_be_created_is_refused(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "notes", ["a.txt"])
    blocker = make_tree(tmp_path, ["blocker.txt"]) / "blocker.txt"
    assert bad_input(check_output_folder, root, blocker) == (
        f"the output folder {blocker} is a file, not a folder"
    )
    assert bad_input(check_output_folder, root, blocker / "out").startswith(
        f"cannot create the output folder {blocker / 'out'}: "
    )


@pytest.mark.skipif(RUNNING_AS_ROOT, reason="root writes in folders whatever their mode")
def test_an_output_folder_that_is_not_writable_is_refused(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "notes", ["a.txt"])
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        assert bad_input(check_output_folder, root, locked).startswith(
            f"cannot write in the output folder {locked}: "
        )
    finally:
        locked.chmod(0o700)
