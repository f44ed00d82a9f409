"""One model's download as a job: its parts and projector, verified, then in the model list.

A job is a row in the hub store with one row per file (app.stores.hub_store),
so it outlives the process: asking for the same model again finds the
unfinished job and resumes it from the `.part` files on disk. Files go to
`<models folder>/<owner>/<repository>/<file>`, as LM Studio lays them out.

Before a byte is fetched the free space on that disk is checked against what is
still missing. While a job runs, a lock file beside its model (filelock) keeps a
second process (the CLI while the window downloads the same model) from writing
the same parts; within one process, `DownloadManager` hands a second request
for a running model the job already running. When every file is verified the
model is added to the model list and paired with its projector.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from filelock import FileLock, Timeout

from app.hub.catalogue import RepoDetails
from app.hub.connection import require_connection
from app.hub.file_transfer import (
    DEFAULT_POLICY,
    DownloadStopped,
    TransferControl,
    TransferPolicy,
    download_file,
)
from app.hub.gguf_files import RemoteModel
from app.hub.remote_file import RemoteFileRef
from app.screen_text.units import format_bytes
from app.stores.hub_store import (
    CANCELLED,
    DONE,
    FAILED,
    PAUSED,
    RUNNING,
    Download,
    DownloadFile,
    HubStore,
)
from app.stores.model_library import ModelLibrary
from engine.errors import BadInputError, ShardChatError

log = logging.getLogger(__name__)

FREE_SPACE_MARGIN_BYTES = 256 << 20
SPEED_WINDOW_S = 5.0


@dataclass(frozen=True)
class DownloadProgress:
    download_id: int
    done_bytes: int
    total_bytes: int
    bytes_per_s: float
    file: str  # the file being fetched now

    @property
    def eta_s(self) -> float | None:
        if self.bytes_per_s <= 0:
            return None
        return (self.total_bytes - self.done_bytes) / self.bytes_per_s


ProgressCallback = Callable[[DownloadProgress], None]


def model_folder(models_dir: Path, repo_id: str) -> Path:
    owner, _, name = repo_id.partition("/")
    return models_dir / owner / name


def start_or_resume(
    store: HubStore, details: RepoDetails, model: RemoteModel, models_dir: Path
) -> Download:
    """The unfinished job for this model, or a new one; refuses what cannot be downloaded."""
    if model.missing_parts:
        raise BadInputError(
            f"{details.repo_id}/{model.path}: {model.missing_parts} part(s) of this split model "
            "are missing from the repository"
        )
    existing = store.unfinished_for(details.repo_id, model.path)
    if existing is not None:
        return existing
    folder = model_folder(models_dir, details.repo_id)
    files = [_file(f.path, f.size, f.sha256, "part", folder) for f in model.parts]
    if model.projector is not None:
        p = model.projector
        files.append(_file(p.path, p.size, p.sha256, "projector", folder))
    return store.add_download(details.repo_id, details.revision, model.path, folder, files)


def check_free_space(download: Download) -> None:
    """Refuse to start when the disk cannot hold what is still missing."""
    missing = download.total_bytes - download.bytes_on_disk()
    folder = _existing_parent(download.folder)
    free = shutil.disk_usage(folder).free
    if missing + FREE_SPACE_MARGIN_BYTES > free:
        raise BadInputError(
            f"not enough disk space in {folder}: {format_bytes(missing)} still to download, "
            f"{format_bytes(free)} free (choose another models folder or free some space)"
        )


def run_download(
    store: HubStore,
    download_id: int,
    endpoint: str,
    headers: dict[str, str],
    on_progress: ProgressCallback,
    control: TransferControl,
    policy: TransferPolicy = DEFAULT_POLICY,
) -> Download:
    """Fetch what is missing, verify, import; the job's row says how it ended."""
    download = store.download(download_id)
    check_free_space(download)
    download.folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(download.folder / f".{Path(download.model_path).name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise BadInputError(
            f"{download.repo_id}/{download.model_path} is already downloading in another "
            "ShardChat window or command"
        ) from None
    try:
        store.set_status(download_id, RUNNING)
        require_connection(endpoint)  # none at all: say so now; a drop later is retried
        _fetch_files(store, download, endpoint, headers, on_progress, control, policy)
        imported = import_download(store.download(download_id))
        store.set_imported(download_id, imported)
        store.set_status(download_id, DONE)
    except DownloadStopped as stopped:
        store.set_status(download_id, CANCELLED if stopped.cancelled else PAUSED)
        raise
    except KeyboardInterrupt:  # Ctrl-C in the CLI: what is on disk stays, to resume
        store.set_status(download_id, PAUSED)
        raise
    except ShardChatError as exc:
        store.set_status(download_id, FAILED, str(exc))
        raise
    finally:
        lock.release()
    return store.download(download_id)


def import_download(download: Download) -> Path:
    """Add the downloaded model to the model list, with its projector paired."""
    model_file = next(f.dest for f in download.files if f.role == "part")
    projector = next((f.dest for f in download.files if f.role == "projector"), None)
    with ModelLibrary() as library:
        library.add(model_file)
        if projector is not None:
            library.pair_projector(model_file, projector)
    log.info("imported %s (projector %s)", model_file, projector)
    return model_file


def _fetch_files(
    store: HubStore,
    download: Download,
    endpoint: str,
    headers: dict[str, str],
    on_progress: ProgressCallback,
    control: TransferControl,
    policy: TransferPolicy,
) -> None:
    meter = _Meter(download, on_progress)
    for file in download.files:
        if file.done and file.dest.exists():
            continue
        ref = RemoteFileRef(endpoint, download.repo_id, download.revision, file.path)
        meter.file = file.path
        if not file.dest.exists():
            download_file(ref, headers, file.dest, file.size, file.sha256, meter.add, control,
                          policy)  # fmt: skip
        store.file_done(download.id, file.path)
    meter.finish()


class _Meter:
    """Bytes so far and a speed over the last few seconds, reported at most 10 times a second."""

    def __init__(self, download: Download, on_progress: ProgressCallback) -> None:
        self.download = download
        self.done = download.bytes_on_disk()
        self.file = ""
        self._on_progress = on_progress
        self._samples: list[tuple[float, int]] = [(time.monotonic(), self.done)]
        self._last_report = 0.0

    def add(self, n_bytes: int) -> None:
        self.done += n_bytes
        now = time.monotonic()
        if now - self._last_report >= 0.1:
            self._report(now)

    def finish(self) -> None:
        self._report(time.monotonic())

    def _report(self, now: float) -> None:
        self._last_report = now
        self._samples.append((now, self.done))
        while len(self._samples) > 2 and now - self._samples[0][0] > SPEED_WINDOW_S:
            self._samples.pop(0)
        start_time, start_bytes = self._samples[0]
        elapsed = now - start_time
        speed = (self.done - start_bytes) / elapsed if elapsed > 0 else 0.0
        self._on_progress(
            DownloadProgress(self.download.id, self.done, self.download.total_bytes, speed,
                             self.file)
        )  # fmt: skip


class DownloadManager:
    """The downloads running in this process; a second request for one joins it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._controls: dict[int, TransferControl] = {}

    def control_for(self, download_id: int) -> tuple[TransferControl, bool]:
        """The job's control and whether it is new (False: the job is already running)."""
        with self._lock:
            if download_id in self._controls:
                return self._controls[download_id], False
            control = TransferControl()
            self._controls[download_id] = control
            return control, True

    def finished(self, download_id: int) -> None:
        with self._lock:
            self._controls.pop(download_id, None)

    def running(self) -> list[int]:
        with self._lock:
            return list(self._controls)

    def pause(self, download_id: int) -> None:
        with self._lock:
            control = self._controls.get(download_id)
        if control is not None:
            control.pause()

    def cancel(self, download_id: int) -> None:
        with self._lock:
            control = self._controls.get(download_id)
        if control is not None:
            control.cancel()


def discard_download(store: HubStore, download: Download) -> None:
    """Cancel a job that is not running: its partial files go, verified ones stay."""
    for file in download.files:
        file.part_path.unlink(missing_ok=True)
    store.set_status(download.id, CANCELLED)


def _file(path: str, size: int, sha256: str | None, role: str, folder: Path) -> DownloadFile:
    name = PurePosixPath(path).name
    return DownloadFile(path, size, sha256, role, folder / name, False)


def _existing_parent(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder
