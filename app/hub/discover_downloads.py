"""The downloads the Discover page lists, without Qt: each as the page shows it, and the
rules for which report still counts.

Apart from the search, repository and planning state (app.hub.discover_model)
because downloads answer to a different rule: those drop a late answer by its
ticket, while a download is keyed by its id and outlives the search and the
repository it came from, so its reports never go stale by ticket. What can go
stale is a progress report that arrives after a pause or a cancel, and a row
read back from the store for a download this session already follows; both are
refused here. Nothing here announces a change: each call says whether one
happened, and the model that owns this tells its listeners.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from app.hub.model_download import DownloadProgress
from app.screen_text.units import format_bytes, format_duration
from app.stores.hub_store import CANCELLED, DONE, FAILED, PAUSED, QUEUED, RUNNING, Download
from engine.model.model_naming import readable_model_name


@dataclass(frozen=True)
class DownloadState:
    """One download as the page shows it: the store's row, and the live figures while it runs."""

    download_id: int
    repo_id: str
    model_path: str  # the first part's path in the repository
    status: str  # app.stores.hub_store's: queued, running, paused, failed, done, cancelled
    done_bytes: int
    total_bytes: int
    bytes_per_s: float = 0.0
    error: str | None = None
    model_file: Path | None = None  # once imported
    projector_file: Path | None = None

    @classmethod
    def of(cls, download: Download, running_here: bool = True) -> DownloadState:
        """From the store's row. A row left "running" by a process that is gone (the app was
        killed) is paused: its .part files are where it stopped."""
        status = download.status
        if status in (RUNNING, QUEUED) and not running_here:
            status = PAUSED
        projector = next((f.dest for f in download.files if f.role == "projector"), None)
        model_file = download.imported_path if status == DONE else None
        return cls(
            download.id, download.repo_id, download.model_path, status, download.bytes_on_disk(),
            download.total_bytes, 0.0, download.error, model_file,
            projector if model_file is not None else None,
        )  # fmt: skip

    @property
    def name(self) -> str:
        return f"{self.repo_id} · {PurePosixPath(self.model_path).name}"

    @property
    def readable_name(self) -> str:
        return readable_model_name(PurePosixPath(self.model_path).name)

    @property
    def fraction(self) -> float:
        return min(1.0, self.done_bytes / self.total_bytes) if self.total_bytes else 0.0

    @property
    def eta_s(self) -> float | None:
        if self.bytes_per_s <= 0:
            return None
        return max(0.0, self.total_bytes - self.done_bytes) / self.bytes_per_s

    @property
    def can_pause(self) -> bool:
        return self.status in (QUEUED, RUNNING)

    @property
    def can_resume(self) -> bool:
        return self.status in (PAUSED, FAILED)

    @property
    def can_cancel(self) -> bool:
        return self.status in (QUEUED, RUNNING, PAUSED, FAILED)

    @property
    def can_load(self) -> bool:
        return self.status == DONE and self.model_file is not None

    def progress_text(self) -> str:
        """One line: how far, how fast, how long still; or how it ended."""
        amount = f"{format_bytes(self.done_bytes)} of {format_bytes(self.total_bytes)}"
        if self.status == RUNNING:
            if self.eta_s is None:
                return f"{amount} · starting…"
            speed = f"{format_bytes(int(self.bytes_per_s))}/s"
            return f"{amount} · {speed} · {format_duration(self.eta_s)} left"
        if self.status == QUEUED:
            return f"{amount} · waiting to start"
        if self.status == PAUSED:
            return f"paused at {amount}"
        if self.status == FAILED:
            return f"stopped at {amount}"
        if self.status == DONE:
            return f"downloaded ({format_bytes(self.total_bytes)}), in My models"
        return "cancelled"

    def note(self) -> str:
        """A word for the quant's row in the quant table, where the progress line is too long."""
        if self.status == DONE:
            return "downloaded"
        if self.status in (RUNNING, QUEUED):
            return "downloading"
        if self.status == FAILED:
            return "download failed"
        return "download paused"


class DiscoverDownloads:
    """The downloads of this session and the unfinished ones of earlier runs, by id.

    The methods that change something return whether they did, so the owner
    announces only real changes: a late progress report redraws nothing.
    """

    def __init__(self) -> None:
        self._states: dict[int, DownloadState] = {}

    def shown(self) -> list[DownloadState]:
        """Newest first; a cancelled one is gone from the page, though it is kept here so a
        late report for it stays refused."""
        shown = [d for d in self._states.values() if d.status != CANCELLED]
        return sorted(shown, key=lambda d: d.download_id, reverse=True)

    def get(self, download_id: int) -> DownloadState | None:
        return self._states.get(download_id)

    def newest_of(self, repo_id: str, model_path: str) -> DownloadState | None:
        """The newest download of this model that was not cancelled: the one its quant row
        speaks of when an older attempt was cancelled and a new one started."""
        found = [d for d in self.shown() if d.repo_id == repo_id and d.model_path == model_path]
        return found[0] if found else None

    def track(self, state: DownloadState) -> None:
        """A download started, joined, ended, or read back from the store: the worker's word
        is the latest, so it replaces what was shown."""
        self._states[state.download_id] = state

    def follow(self, state: DownloadState) -> None:
        """A running job was joined: shown if it was not yet, left as is if it was, since the
        figures shown are newer than the store's row."""
        self._states.setdefault(state.download_id, state)

    def add_unfinished(self, states: Sequence[DownloadState]) -> bool:
        """Unfinished downloads of earlier runs; one this session already follows stays as is,
        since the store's row lags what this session's worker reported."""
        new = [s for s in states if s.download_id not in self._states]
        for state in new:
            self._states[state.download_id] = state
        return bool(new)

    def show_progress(self, progress: DownloadProgress) -> bool:
        """A running download's figures; False for a report that arrives after a pause or a
        cancel, which must not bring the download back to "running"."""
        state = self._states.get(progress.download_id)
        if state is None or state.status not in (QUEUED, RUNNING):
            return False
        self._states[state.download_id] = replace(
            state, status=RUNNING, done_bytes=progress.done_bytes,
            total_bytes=progress.total_bytes, bytes_per_s=progress.bytes_per_s,
        )  # fmt: skip
        return True

    def mark(self, download_id: int, status: str, error: str | None = None) -> bool:
        """A status set here (asked to run, pause or stop) before the worker reports back, so
        the buttons follow the click at once; it keeps its figures but no speed."""
        state = self._states.get(download_id)
        if state is None:
            return False
        self._states[download_id] = replace(state, status=status, error=error, bytes_per_s=0.0)
        return True
