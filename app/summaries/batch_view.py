"""What the batch panel shows, as one plain value, and the pure steps that move it on.

The panel only renders a `BatchView`; the controller replaces it with the
result of these functions as the scan, the person and the engine report. Kept
free of Qt (and of llama.cpp: job values are only read, never imported) so the
state rules — which buttons apply when, what a pause or a cancel leaves behind,
how progress reads — are tested without a window.

Pausing is cancelling the job request: the summaries already written stay and
the job store remembers the rest, so Resume submits the same job again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.screen_text.units import speed_text
from app.stores.job_store import DONE, FAILED, PENDING, SKIPPED, FileRecord
from app.summaries.document_scan import FolderScan, default_output_folder
from app.summaries.summary_output import summary_path
from engine.errors import BadInputError

if TYPE_CHECKING:  # app.summaries.summary_job pulls in llama.cpp; the panel must not
    from app.summaries.summary_job import JobOutcome, JobProgress

IDLE, RUNNING, PAUSED, FINISHED, FAILED_STATE = "idle", "running", "paused", "finished", "failed"
FAIRNESS = "Chat replies go first: the batch pauses while a reply is written."


@dataclass(frozen=True)
class BatchView:
    folder: Path | None = None
    output_folder: Path | None = None  # None: `<folder>-summaries`
    rows: tuple[FileRecord, ...] = ()
    files_done: int = 0  # files with an outcome (done, failed or skipped)
    files_total: int = 0
    tokens_per_s: float = 0.0
    parallel: int = 0  # documents decoding together in the running job
    eta_text: str = ""
    state: str = IDLE
    message: str = ""
    instruction: str = ""  # empty: the job's own instruction
    max_words: int | None = None  # None: the job's default length

    @property
    def can_start(self) -> bool:
        return (
            self.folder is not None
            and self.state not in (RUNNING, PAUSED)
            and any(row.status != SKIPPED for row in self.rows)
        )

    @property
    def can_pause(self) -> bool:
        return self.state == RUNNING

    @property
    def can_resume(self) -> bool:
        return self.state == PAUSED

    @property
    def can_cancel(self) -> bool:
        return self.state in (RUNNING, PAUSED)

    @property
    def can_change_folder(self) -> bool:
        """A job's folders and settings are its identity: they hold still until it stops."""
        return self.state not in (RUNNING, PAUSED)


def shown_output_folder(view: BatchView) -> Path | None:
    """Where summaries go: the chosen folder, else `<folder>-summaries`."""
    if view.output_folder is not None or view.folder is None:
        return view.output_folder
    try:
        return default_output_folder(view.folder)
    except BadInputError:
        return None  # the root folder has no side to put it beside: one must be chosen


def summary_file(view: BatchView, row: int) -> Path | None:
    """The summary written for the row'th file, or None while it has none."""
    output = shown_output_folder(view)
    if output is None or not 0 <= row < len(view.rows) or view.rows[row].status != DONE:
        return None
    return summary_path(output, view.rows[row].path, {r.path for r in view.rows})


def dropped_folder(paths: Sequence[Path]) -> Path:
    """The one folder a drop carries; anything else is refused with a one-line reason."""
    if len(paths) != 1:
        raise BadInputError(f"drop one folder at a time, not {len(paths)} items")
    if not paths[0].is_dir():
        raise BadInputError(f"{paths[0].name} is not a folder; drop the folder that holds it")
    return paths[0]


def with_folder(view: BatchView, scan: FolderScan) -> BatchView:
    """A new folder: its documents pending, the entries the scan cannot read skipped."""
    documents = [FileRecord(_relative(scan, path), PENDING) for path in scan.documents]
    skipped = [FileRecord(_relative(scan, s.path), SKIPPED, error=s.reason) for s in scan.skipped]
    rows = _sorted(documents + skipped)
    found = f"{len(documents)} documents found" if documents else f"no documents in {scan.folder}"
    return replace(
        view, folder=scan.folder, output_folder=None, rows=rows, files_done=len(skipped),
        files_total=len(rows), tokens_per_s=0.0, eta_text="", state=IDLE,
        message=found + (f", {len(skipped)} skipped" if skipped else ""),
    )  # fmt: skip


def with_output_folder(view: BatchView, output_folder: Path) -> BatchView:
    return replace(view, output_folder=output_folder, message="")


def with_message(view: BatchView, message: str) -> BatchView:
    """A refusal or a note: said once, nothing else changes."""
    return replace(view, message=message)


def started(view: BatchView) -> BatchView:
    """Running. After a finished job every file shows pending again (the job then reports
    those it keeps, unchanged since, as done at once); otherwise it resumes."""
    rows = view.rows
    if view.state == FINISHED:
        rows = tuple(r if r.status == SKIPPED else FileRecord(r.path, PENDING) for r in rows)
    done = sum(1 for row in rows if row.status != PENDING)
    return replace(
        view, rows=rows, files_done=done, files_total=len(rows), state=RUNNING,
        tokens_per_s=0.0, eta_text="", message="",
    )  # fmt: skip


def paused(view: BatchView) -> BatchView:
    return replace(
        view, state=PAUSED, eta_text="",
        message="Pausing: summaries already written stay; Resume carries on from there.",
    )  # fmt: skip


def cancelled(view: BatchView) -> BatchView:
    return replace(
        view, state=IDLE, eta_text="",
        message="Cancelled: summaries already written stay; Summarise carries on from there.",
    )  # fmt: skip


def failed(view: BatchView, message: str) -> BatchView:
    return replace(view, state=FAILED_STATE, eta_text="", message=message)


def with_progress(view: BatchView, progress: JobProgress) -> BatchView:
    """Counts, speed and time left; the row of the file just finished, if any.

    The state is left alone: reports still arrive for a moment after a pause.
    """
    rows = view.rows if progress.finished is None else _with_row(view.rows, progress.finished)
    return replace(
        view, rows=rows, files_done=progress.files_done, files_total=progress.files_total,
        tokens_per_s=progress.tokens_per_s, parallel=progress.parallel,
        eta_text=eta_text(progress.eta_s) if view.state == RUNNING else "",
    )  # fmt: skip


def with_outcome(view: BatchView, outcome: JobOutcome) -> BatchView:
    """The job ended: every file's truth from the job store; finished, or paused/cancelled."""
    rows = _sorted(outcome.records)
    done = sum(1 for row in rows if row.status != PENDING)
    view = replace(
        view, rows=rows, output_folder=outcome.output_folder, files_done=done,
        files_total=len(rows), eta_text="",
    )  # fmt: skip
    if not outcome.cancelled:
        return replace(view, state=FINISHED, message=_finished_message(rows, outcome.seconds))
    stopped = f"{done} of {len(rows)} files done"
    if view.state == PAUSED:
        return replace(view, message=f"Paused: {stopped}; Resume carries on where it stopped.")
    return replace(
        view, state=IDLE, message=f"Cancelled: {stopped}; the summaries written are kept."
    )


def progress_text(view: BatchView) -> str:
    """'12 of 40 files · 4 at a time · 85.4 tok/s · about 2 min left' (the parts known)."""
    if view.folder is None:
        return "Choose or drop a folder to summarise"
    parts = [f"{view.files_done} of {view.files_total} files"]
    if view.state == RUNNING and view.parallel > 1:
        parts.append(f"{view.parallel} at a time")
    if view.state == RUNNING and view.tokens_per_s > 0:
        parts.append(speed_text(view.tokens_per_s))
    if view.state == RUNNING and view.eta_text:
        parts.append(view.eta_text)
    if view.state in (PAUSED, FINISHED):
        parts.append(view.state)
    return " · ".join(parts)


def eta_text(eta_s: float | None) -> str:
    if eta_s is None:
        return ""
    if eta_s < 60:
        return "under a minute left"
    if eta_s < 3600:
        return f"about {round(eta_s / 60)} min left"
    hours, minutes = divmod(round(eta_s / 60), 60)
    return f"about {hours} h {minutes} min left"


def _with_row(rows: tuple[FileRecord, ...], record: FileRecord) -> tuple[FileRecord, ...]:
    if all(row.path != record.path for row in rows):
        return (*rows, record)  # the folder changed since it was listed
    return tuple(record if row.path == record.path else row for row in rows)


def _sorted(rows: Sequence[FileRecord]) -> tuple[FileRecord, ...]:
    """The scan's order (case ignored first), whichever source the rows come from."""
    return tuple(sorted(rows, key=lambda row: [(p.casefold(), p) for p in row.path.split("/")]))


def _finished_message(rows: tuple[FileRecord, ...], seconds: float) -> str:
    counts = [
        f"{n} {label}"
        for label, status in (("summarised", DONE), ("failed", FAILED), ("skipped", SKIPPED))
        if (n := sum(1 for row in rows if row.status == status))
    ]
    return f"Done in {seconds:.0f} s: " + (", ".join(counts) or "no files")


def _relative(scan: FolderScan, path: Path) -> str:
    return scan.relative(path).as_posix()
