"""Summaries of real third-party text do not loop.

The files are licence texts this machine already has (Debian's common-licenses,
else the licence files of installed Python packages): prose nobody wrote for
the test. With the sampling summaries had before (greedy, nothing penalised)
`shardchat summarize` on four licence texts said one sentence again and again
in every summary (`--repeat-penalty 1 --dry-multiplier 0 --no-loop-guard`
shows it); with the summary settings no sentence comes three times.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from importlib.metadata import distributions
from pathlib import Path

from app.stores.job_store import JobStore
from app.summaries.summary_job import SummaryJob, SummarySettings
from engine.runtime.loaded_model import LoadedModel

LICENCES = Path("/usr/share/common-licenses")
SHORT = 8000  # characters: one part each, so one sequence says each summary
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")


def real_text_files(limit: int = 2) -> list[Path]:
    """Short real licence texts found on this machine, shortest first."""
    found = [p for p in LICENCES.glob("*") if p.is_file()] if LICENCES.is_dir() else []
    if len(found) < limit:
        for dist in distributions():
            found += [p for p in map(Path, (f.locate() for f in dist.files or ()))
                      if "LICEN" in p.name.upper() and p.is_file()]  # fmt: skip
    short = sorted(
        (p for p in found if 500 < p.stat().st_size < SHORT), key=lambda p: p.stat().st_size
    )
    assert len(short) >= limit, "no real text files on this machine"
    return short[:limit]


def summaries(model: LoadedModel, settings: SummarySettings, tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "in"
    folder.mkdir(parents=True)
    for source in real_text_files():
        shutil.copyfile(source, folder / f"{source.name}.txt")
    out = tmp_path / "out"
    with JobStore(tmp_path / "jobs.sqlite3") as store:
        outcome = SummaryJob(model, folder, out, settings, store).run()
    assert [r.status for r in outcome.records] == ["done", "done"], outcome.records
    return {r.path: (out / f"{r.path}.md").read_text().split("\n---\n")[0] for r in outcome.records}


def most_repeated_sentence(summary: str) -> int:
    body = summary.split("\n", 1)[1]  # after the "# name" heading
    sentences = [" ".join(s.split()).lower() for s in _SENTENCE.findall(body)]
    counts = Counter(s for s in sentences if len(s.split()) >= 4)
    return max(counts.values(), default=0)


def test_summaries_of_real_text_say_no_sentence_three_times(
    default_model: LoadedModel, tmp_path: Path
) -> None:
    settings = SummarySettings(parallel=2)
    found = summaries(default_model, settings, tmp_path / "now")
    assert all(most_repeated_sentence(s) < 3 for s in found.values()), found
    assert all(len(s.split()) > 10 for s in found.values()), found  # they do say something
