"""Where summaries go and what the reports say.

The output folder mirrors the input tree; each input file gets `<its name>.md`
(the full name is kept, so `a.txt` and `a.md` never collide), except that a
Markdown input keeps its own name: `notes.md`, not `notes.md.md`. report.json
is for programs, report.md for people; both are rewritten atomically as files
finish, so a killed job leaves a truthful report. Like any file the user
makes, they get the user's umask (a temp file alone would make them 0600).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections import Counter
from collections.abc import Collection
from pathlib import Path

from app.stores.atomic_files import write_text_atomic
from app.stores.job_store import FileRecord

REPORT_JSON, REPORT_MD = "report.json", "report.md"


def summary_path(output_folder: Path, relative: str, inputs: Collection[str] = ()) -> Path:
    """The summary file of the input at `relative` (forward slashes) in the output tree.

    `inputs`: the job's other inputs. A Markdown input whose own name is another input's
    summary name (`x.txt.md` beside `x.txt`) keeps the added `.md`, so neither is lost."""
    target = output_folder.joinpath(*relative.split("/"))
    if target.suffix.lower() == ".md" and relative[:-3] not in inputs:
        return target
    return target.with_name(target.name + ".md")


def write_summary(
    output_folder: Path, relative: str, summary: str, footer: str, inputs: Collection[str] = ()
) -> Path:
    path = summary_path(output_folder, relative, inputs)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = f"# {relative}\n\n{summary.strip()}\n\n---\n\n*{footer}*\n"
    write_text_atomic(path, text, user_file_mode())
    return path


def write_reports(output_folder: Path, input_folder: Path, records: list[FileRecord]) -> None:
    data = {
        "input_folder": str(input_folder),
        "output_folder": str(output_folder),
        "counts": dict(Counter(r.status for r in records)),
        "files": [r.to_dict() for r in records],
    }
    mode = user_file_mode()
    text = json.dumps(data, indent=2, ensure_ascii=False)
    write_text_atomic(output_folder / REPORT_JSON, text, mode)
    write_text_atomic(output_folder / REPORT_MD, report_markdown(input_folder, records), mode)


def user_file_mode() -> int:
    """0666 less the user's umask, as `open()` would create the file."""
    return 0o666 & ~_umask()


def _umask() -> int:
    """Read from /proc where it can be: setting the umask to read it back is process-wide,
    and another thread creating a file in between would get the wrong mode. Windows has no
    /proc, and its umask only ever removes write permission, which nothing sets there."""
    if sys.platform == "win32":
        return 0
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii")
        found = re.search(r"^Umask:\s*([0-7]+)", status, re.MULTILINE)
        if found:
            return int(found.group(1), 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def report_markdown(input_folder: Path, records: list[FileRecord]) -> str:
    counts = Counter(r.status for r in records)
    lines = [
        f"# Summaries of {input_folder}",
        "",
        ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no files",
        "",
        "| file | status | pages | characters | tokens in | tokens out | seconds | note |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in records:
        note = (r.error or r.note or "").replace("|", "\\|")
        lines.append(
            f"| {_cell(r.path)} | {r.status} | {r.pages or ''} | {r.characters or ''} | "
            f"{r.tokens_in} | {r.tokens_out} | {r.seconds:.1f} | {note} |"
        )
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
