"""Where summaries go and what the reports say.

The output folder mirrors the input tree; each input file gets
`<its name>.md` (the full name is kept, so `a.txt` and `a.md` never collide).
report.json is for programs, report.md for people; both are rewritten
atomically as files finish, so a killed job leaves a truthful report.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from app.stores.atomic_files import write_text_atomic
from app.stores.job_store import FileRecord

REPORT_JSON, REPORT_MD = "report.json", "report.md"


def summary_path(output_folder: Path, relative: str) -> Path:
    """The summary file of the input at `relative` (forward slashes) in the output tree."""
    target = output_folder.joinpath(*relative.split("/"))
    return target.with_name(target.name + ".md")


def write_summary(output_folder: Path, relative: str, summary: str, footer: str) -> Path:
    path = summary_path(output_folder, relative)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, f"# {relative}\n\n{summary.strip()}\n\n---\n\n*{footer}*\n")
    return path


def write_reports(output_folder: Path, input_folder: Path, records: list[FileRecord]) -> None:
    data = {
        "input_folder": str(input_folder),
        "output_folder": str(output_folder),
        "counts": dict(Counter(r.status for r in records)),
        "files": [r.to_dict() for r in records],
    }
    write_text_atomic(output_folder / REPORT_JSON, json.dumps(data, indent=2, ensure_ascii=False))
    write_text_atomic(output_folder / REPORT_MD, report_markdown(input_folder, records))


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
