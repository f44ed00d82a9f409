"""Pulling one model from the Hub, the same way for `shardchat models pull` and the Discover page.

The steps, each its own call so a caller can stop between them or run them on
different threads: `resolve` names the repository's quant or file a person asked
for (or the one recommended for this machine), `check_header` refuses a file
whose header is not a usable GGUF before a byte of weights is fetched, `start`
finds the unfinished job for that model or makes one (a second request for a job
this process is running joins it), and `run` fetches what is missing, verifies
it, adds the model to the model list with its projector, and reports progress
through a plain callback. No Qt: the page wraps these calls in its worker
threads and signals (ui.models.discover_jobs), the CLI calls them in order.

The Hub calls take a `Catalogue` from the caller: huggingface_hub's client is
one per thread, and the page makes a fresh one per worker call so a token kept
meanwhile is used.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.hub.catalogue import Catalogue, RepoDetails
from app.hub.file_transfer import DEFAULT_POLICY, TransferControl, TransferPolicy
from app.hub.gguf_files import RemoteModel, choose_model
from app.hub.hub_settings import models_dir
from app.hub.model_download import (
    DownloadManager,
    ProgressCallback,
    discard_download,
    run_download,
    start_or_resume,
)
from app.hub.remote_plans import QuantReading, default_budget, predict_quants, read_quants
from app.hub.remote_plans import recommended as recommended_model
from app.stores.hub_store import Download, HubStore
from engine.errors import BadInputError
from engine.machine.profile import Profile

PLANNED_CONTEXT = 4096  # the context a quant is recommended for when none was asked


@dataclass(frozen=True)
class PullStart:
    """A pull's job as `start` found or made it."""

    download: Download
    control: TransferControl  # pauses or cancels the job while it runs
    is_new: bool  # False: this process runs the job already; the caller joins it


def read_headers(
    catalogue: Catalogue, details: RepoDetails, models: Sequence[RemoteModel]
) -> list[QuantReading]:
    """The quants' headers (cached by commit in the hub store) as the planner reads them."""
    with HubStore() as store:
        return read_quants(
            models, catalogue.endpoint, details.repo_id, details.revision,
            catalogue.auth_headers(), store,
        )  # fmt: skip


def resolve(
    catalogue: Catalogue,
    target: str,
    revision: str,
    profile: Callable[[], Profile | None],
) -> tuple[RepoDetails, RemoteModel]:
    """The repository of `REPO[:QUANT|:FILE]` and the model it names; without a name, the
    quant recommended for `profile()` (asked only then), or the smallest without one."""
    repo_id, _, wanted = target.partition(":")
    details = catalogue.details(repo_id, revision)
    if wanted:
        return details, _named_model(details, wanted)
    if not details.models:
        raise BadInputError(f"{details.repo_id} has no GGUF model files")
    planned_for = profile()
    if planned_for is None:
        return details, details.models[0]  # the smallest: safe without knowing the machine
    return details, _recommended(catalogue, details, planned_for)


def check_header(catalogue: Catalogue, details: RepoDetails, model: RemoteModel) -> None:
    """Refuse, before a byte of weights, a file whose header is not a usable GGUF."""
    (reading,) = read_headers(catalogue, details, [model])
    if reading.problem:
        raise BadInputError(f"not downloading {details.repo_id}/{model.path}: {reading.problem}")


class PullWorkflow:
    """The pulls of this process: one `DownloadManager`, so a second request for a model
    that is downloading joins its job, and one `start` at a time, so no twin jobs."""

    def __init__(self, policy: TransferPolicy = DEFAULT_POLICY) -> None:
        self.policy = policy
        self.manager = DownloadManager()
        self._starting = threading.Lock()

    def start(self, details: RepoDetails, model: RemoteModel) -> PullStart:
        """The unfinished job for this model (resumed from its `.part` files) or a new one in
        the models folder; refuses a split model with parts missing."""
        with self._starting, HubStore() as store:
            download = start_or_resume(store, details, model, models_dir())
            control, is_new = self.manager.control_for(download.id)
        return PullStart(download, control, is_new)

    def resume(self, download_id: int) -> tuple[TransferControl, bool]:
        """The control to run a stored job again with, and whether it is not running yet."""
        return self.manager.control_for(download_id)

    def run(
        self,
        download_id: int,
        control: TransferControl,
        on_progress: ProgressCallback,
        catalogue: Catalogue | None = None,
    ) -> Download:
        """Fetch, verify and import (through `catalogue`, else a new one for this thread);
        raises `DownloadStopped` on a pause or cancel, a `ShardChatError` on a failure (the
        job's row keeps either, to resume). The job stops counting as running here before
        this returns or raises, so a resume may follow at once."""
        try:
            hub = catalogue or Catalogue()
            with HubStore() as store:
                return run_download(
                    store, download_id, hub.endpoint, hub.auth_headers(), on_progress, control,
                    self.policy,
                )  # fmt: skip
        finally:
            self.manager.finished(download_id)

    def pause(self, download_id: int) -> bool:
        """Ask a running job to stop where it is (its `.part` files stay); False if it is not
        running here."""
        if download_id not in self.manager.running():
            return False
        self.manager.pause(download_id)
        return True

    def cancel(self, download_id: int) -> bool:
        """Ask a running job to stop and delete its partial file; False if it is not running
        here (then `discard` it, off the GUI thread)."""
        if download_id not in self.manager.running():
            return False
        self.manager.cancel(download_id)
        return True

    def pause_all(self) -> None:
        """Pause every job running here: each resumes from its `.part` files later."""
        for download_id in self.manager.running():
            self.manager.pause(download_id)


def stored(download_id: int) -> Download:
    """A job as the hub store has it now."""
    with HubStore() as store:
        return store.download(download_id)


def discard(download_id: int) -> None:
    """Cancel a job that is not running: its partial files go, verified ones stay."""
    with HubStore() as store:
        discard_download(store, store.download(download_id))


def _named_model(details: RepoDetails, wanted: str) -> RemoteModel:
    model = choose_model(details.models, wanted)
    if model is None:
        quants = ", ".join(m.quant or m.path for m in details.models) or "none"
        raise BadInputError(f"{details.repo_id} has no quant or file {wanted!r} ({quants})")
    return model


def _recommended(catalogue: Catalogue, details: RepoDetails, profile: Profile) -> RemoteModel:
    readings = read_headers(catalogue, details, details.models)
    predictions = predict_quants(readings, profile, default_budget(profile), PLANNED_CONTEXT)
    best = recommended_model(list(details.models), lambda m: predictions.get(m.path))
    return best or details.models[0]
