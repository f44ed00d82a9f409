"""The Discover page's work on worker threads, its answers handed to the model on the GUI thread.

A thin Qt bridge: every Hub call (search, listing a repository, reading headers
by range) and the planning of a repository's quants runs on a worker here, and
the answer comes back through a queued signal into `DiscoverModel`
(app.hub.discover_model), which the page (ui.models.discover_page) renders. Downloads
are app.hub.pull_workflow's, the same steps `shardchat models pull` takes; this
class only runs them on its workers and reports their progress as signals. The
hub store is opened inside each worker call (one SQLite connection per thread).
Answers for a search typed over or a repository clicked past are dropped by the
model's tickets. A failure of any kind comes back as one line, never an exception.

Downloads outlive the dialog when the desktop keeps the jobs (ui.desktop);
`shutdown` pauses them, and they are listed with Resume the next time, like
unfinished downloads of an earlier run.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from typing import TypeVar

from PySide6.QtCore import QObject, Qt, Signal, SignalInstance

from app.hub.catalogue import Catalogue, RepoDetails, RepoSummary
from app.hub.discover_downloads import DownloadState
from app.hub.discover_model import DiscoverModel, PredictionRequest, SearchQuery
from app.hub.file_transfer import DEFAULT_POLICY, DownloadStopped, TransferControl, TransferPolicy
from app.hub.gguf_files import RemoteModel
from app.hub.hub_errors import HubOfflineError
from app.hub.hub_settings import save_token
from app.hub.model_download import DownloadManager, DownloadProgress
from app.hub.pull_workflow import PullWorkflow, discard, read_headers, stored
from app.hub.remote_plans import Prediction, QuantReading
from app.stores.hub_store import CANCELLED, DONE, PAUSED, QUEUED, UNFINISHED, HubStore
from engine.errors import ShardChatError
from engine.machine.profile import Profile

log = logging.getLogger(__name__)

SEARCH_LIMIT = 40

T = TypeVar("T")


class DiscoverJobs(QObject):
    """The Discover page's work on worker threads; answers go into the model on the GUI thread.

    Browsing (search, listing, headers) and starting downloads share a small pool;
    planning has its own worker so a moved slider never waits behind the network;
    downloads run on a pool of their own. `PullWorkflow` keeps one job per model:
    asking again for a model that is downloading joins it.
    """

    imported = Signal(str)  # a download finished: this model file is in the model list
    _searched = Signal(int, object)  # ticket, list[RepoSummary] | str
    _listed = Signal(int, object)  # ticket, RepoDetails | str
    _read = Signal(int, object)  # ticket, list[QuantReading] | str
    _planned = Signal(object, object)  # PredictionRequest, {path: Prediction | None} | str
    _tracked = Signal(object)  # DownloadState: started, stopped or finished
    _joined = Signal(object)  # DownloadState of a job already running
    _progressed = Signal(object)  # DownloadProgress
    _failed = Signal(int, str)  # download id, why
    _refused = Signal(str)  # why a download could not start
    _unfinished = Signal(object)  # list[DownloadState] of earlier runs
    _token_kept = Signal(str, bool)  # where the token went, or why not; whether it was kept

    def __init__(
        self,
        model: DiscoverModel,
        policy: TransferPolicy = DEFAULT_POLICY,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.model = model
        self.pulls = PullWorkflow(policy)
        self._browser = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hub-browse")
        self._planner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hub-plan")
        self._transfers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="hub-download")
        self._wanted_repository = 0  # the listing the model waits for (read by workers)
        self._resume_when_stopped: set[int] = set()
        self._download_when_listed: tuple[str, str] | None = None  # repository, quant path
        self._closed = False
        queued = Qt.ConnectionType.QueuedConnection
        self._searched.connect(self._on_searched, queued)
        self._listed.connect(self._on_listed, queued)
        self._read.connect(self._on_read, queued)
        self._planned.connect(self._on_planned, queued)
        self._tracked.connect(self._on_tracked, queued)
        self._joined.connect(self._on_joined, queued)
        self._progressed.connect(self._on_progress, queued)
        self._failed.connect(self._on_failed, queued)
        self._refused.connect(self._on_refused, queued)
        self._unfinished.connect(self._on_unfinished, queued)
        self._token_kept.connect(self._on_token_kept, queued)

    @property
    def manager(self) -> DownloadManager:
        """The downloads running in this process."""
        return self.pulls.manager

    # -- asked on the GUI thread ---------------------------------------------------------------

    def search(self, query: SearchQuery) -> None:
        ticket = self.model.begin_search(query)
        self._submit(self._browser, self._search, ticket, query)

    def open_repository(self, repo_id: str) -> None:
        ticket = self.model.open_repository(repo_id)
        if ticket is not None:
            self._wanted_repository = ticket
            self._submit(self._browser, self._list, ticket, repo_id)

    def use_machine(self, profile: Profile | None, budget_bytes: int | None, n_ctx: int) -> None:
        """Plan with this profile, budget (None: the profile's default) and context."""
        self._plan(self.model.use_machine(profile, budget_bytes, n_ctx))

    def set_budget(self, budget_bytes: int) -> None:
        self._plan(self.model.set_budget(budget_bytes))

    def set_context(self, n_ctx: int) -> None:
        self._plan(self.model.set_context(n_ctx))

    def download(self, model: RemoteModel) -> None:
        """Download a quant of the repository shown (or join its download if it runs)."""
        details = self.model.details
        if details is not None:
            self._submit(self._browser, self._start, details, model)

    def download_listed(self, repo_id: str, model_path: str) -> None:
        """Show the repository and download this quant of it as soon as it is listed: the
        wizard's suggestion, one click away from a download that can be paused and loaded."""
        self._download_when_listed = (repo_id, model_path)
        self.open_repository(repo_id)
        self._start_pending_download()  # already shown and listed: at once

    def resume(self, download_id: int) -> None:
        control, is_new = self.pulls.resume(download_id)
        if not is_new:  # still stopping after a pause: go on once it has stopped
            self._resume_when_stopped.add(download_id)
            return
        self.model.mark(download_id, QUEUED)
        self._submit(self._transfers, self._run, download_id, control)

    def pause(self, download_id: int) -> None:
        self._resume_when_stopped.discard(download_id)
        if self.pulls.pause(download_id):
            self.model.mark(download_id, PAUSED)

    def cancel(self, download_id: int) -> None:
        """Stop a download and delete what it fetched of the file in progress."""
        self._resume_when_stopped.discard(download_id)
        if not self.pulls.cancel(download_id):
            self._submit(self._browser, self._discard, download_id)
        self.model.mark(download_id, CANCELLED)

    def save_token(self, token: str) -> None:
        """Keep a token (the keyring may take a while: on a worker), then list the repository
        shown again with it."""
        self._submit(self._browser, self._keep_token, token)

    def load_unfinished(self) -> None:
        """List the downloads an earlier run left unfinished (with Resume)."""
        self._submit(self._browser, self._list_unfinished)

    def shutdown(self, wait: bool = False) -> None:
        """Pause every running download (each resumes from its .part files later) and stop
        taking work. The app never waits for the workers (`wait` is for tests, whose local
        hub must outlive them)."""
        self._closed = True
        self.pulls.pause_all()
        for pool in (self._browser, self._planner, self._transfers):
            pool.shutdown(wait=wait, cancel_futures=True)

    def _submit(self, pool: ThreadPoolExecutor, call: Callable[..., None], *args: object) -> None:
        if not self._closed:
            pool.submit(call, *args)

    def _plan(self, request: PredictionRequest | None) -> None:
        if request is not None:
            self._submit(self._planner, self._predict, request)

    # -- on worker threads ---------------------------------------------------------------------

    def _search(self, ticket: int, query: SearchQuery) -> None:
        answer = _attempt(
            lambda: Catalogue().search(query.text, kind=query.kind, sort=query.sort,
                                       limit=SEARCH_LIMIT)
        )  # fmt: skip
        _emit(self._searched, ticket, answer)

    def _list(self, ticket: int, repo_id: str) -> None:
        catalogue = Catalogue()
        details = _attempt(lambda: catalogue.details(repo_id))
        _emit(self._listed, ticket, details)
        if isinstance(details, str) or not details.models or self._wanted_repository != ticket:
            return
        readings = _attempt(lambda: read_headers(catalogue, details, details.models))
        _emit(self._read, ticket, readings)

    def _predict(self, request: PredictionRequest) -> None:
        _emit(self._planned, request, _attempt(request.run))

    def _start(self, details: RepoDetails, model: RemoteModel) -> None:
        try:
            started = self.pulls.start(details, model)
        except ShardChatError as exc:
            _emit(self._refused, str(exc))
            return
        except Exception as exc:  # the page must say something, whatever went wrong
            log.exception("starting the download of %s/%s failed", details.repo_id, model.path)
            _emit(self._refused, _unexpected(exc))
            return
        state = DownloadState.of(started.download)
        if not started.is_new:
            _emit(self._joined, state)
            return
        _emit(self._tracked, replace(state, status=QUEUED, error=None))
        self._submit(self._transfers, self._run, started.download.id, started.control)

    def _run(self, download_id: int, control: TransferControl) -> None:
        outcome = self._outcome(download_id, control)
        if isinstance(outcome, str):
            _emit(self._failed, download_id, outcome)
        else:
            _emit(self._tracked, outcome)

    def _outcome(self, download_id: int, control: TransferControl) -> DownloadState | str:
        """How the download ended: its state (done, paused, cancelled) or why it failed."""
        try:
            try:
                progressed = partial(_emit, self._progressed)
                return DownloadState.of(self.pulls.run(download_id, control, progressed))
            except DownloadStopped:
                return DownloadState.of(stored(download_id), running_here=False)
        except ShardChatError as exc:
            return str(exc)
        except Exception as exc:
            log.exception("download %d failed", download_id)
            return _unexpected(exc)

    def _discard(self, download_id: int) -> None:
        try:
            discard(download_id)
        except Exception:
            log.exception("discarding download %d failed", download_id)

    def _keep_token(self, token: str) -> None:
        try:
            _emit(self._token_kept, save_token(token), True)
        except Exception as exc:  # ValueError for an empty one, an OSError writing the file
            _emit(self._token_kept, f"the token was not kept: {exc}", False)

    def _list_unfinished(self) -> None:
        try:
            with HubStore() as store:
                found = store.downloads(UNFINISHED)
        except Exception:
            log.exception("reading the unfinished downloads failed")
            return
        running = set(self.manager.running())
        _emit(self._unfinished, [DownloadState.of(d, d.id in running) for d in found])

    # -- answers, on the GUI thread ------------------------------------------------------------

    def _on_searched(self, ticket: int, answer: list[RepoSummary] | str) -> None:
        if isinstance(answer, _OfflineLine):
            self.model.went_offline(ticket, answer)
        elif isinstance(answer, str):
            self.model.search_failed(ticket, answer)
        else:
            self.model.show_results(ticket, answer)

    def _on_listed(self, ticket: int, answer: RepoDetails | str) -> None:
        if isinstance(answer, str):
            self.model.repository_failed(ticket, answer)
        elif self.model.show_details(ticket, answer):
            self._start_pending_download()

    def _start_pending_download(self) -> None:
        pending, details = self._download_when_listed, self.model.details
        if pending is None or details is None or details.repo_id != pending[0]:
            return
        self._download_when_listed = None
        model = next((m for m in details.models if m.path == pending[1]), None)
        if model is None:
            self.model.refuse(f"{pending[0]} no longer has {pending[1]}")
            return
        self.model.select_quant(model.path)
        self.download(model)

    def _on_read(self, ticket: int, answer: list[QuantReading] | str) -> None:
        if isinstance(answer, str):
            self.model.repository_failed(ticket, answer)
        else:
            self._plan(self.model.show_readings(ticket, answer))

    def _on_planned(
        self, request: PredictionRequest, answer: dict[str, Prediction | None] | str
    ) -> None:
        if isinstance(answer, str):
            self.model.planning_failed(request, answer)
        else:
            self.model.show_predictions(request, answer)

    def _on_tracked(self, state: DownloadState) -> None:
        current = self.model.download(state.download_id)
        cancelled = current is not None and current.status == CANCELLED
        if cancelled and state.status not in (DONE, CANCELLED):
            # cancelled while it was stopping after a pause: discard what the pause kept
            self._submit(self._browser, self._discard, state.download_id)
            state = replace(state, status=CANCELLED)
        self.model.track(state)
        if state.status == DONE and state.model_file is not None:
            self.imported.emit(str(state.model_file))
        if state.download_id in self._resume_when_stopped and state.status != QUEUED:
            self._resume_when_stopped.discard(state.download_id)
            if state.status == PAUSED:
                self.resume(state.download_id)

    def _on_failed(self, download_id: int, message: str) -> None:
        self._resume_when_stopped.discard(download_id)
        self.model.download_failed(download_id, message)

    def _on_joined(self, state: DownloadState) -> None:
        self.model.joined(state)

    def _on_progress(self, progress: DownloadProgress) -> None:
        self.model.show_progress(progress)

    def _on_refused(self, message: str) -> None:
        self.model.refuse(message)

    def _on_unfinished(self, states: list[DownloadState]) -> None:
        self.model.add_unfinished(states)

    def _on_token_kept(self, where: str, kept: bool) -> None:
        if not kept:
            self.model.refuse(where)
            return
        log.info("Hugging Face token kept in %s", where)
        if self.model.repo_id is not None:
            self.open_repository(self.model.repo_id)  # listed again, now with the token


# -- plain helpers ---------------------------------------------------------------------------------


class _OfflineLine(str):
    """Why a Hub call failed, when the reason is that there is no connection at all."""


def _attempt(call: Callable[[], T]) -> T | str:
    """The call's answer, or the one line that says why it failed (never an exception)."""
    try:
        return call()
    except HubOfflineError as exc:
        return _OfflineLine(exc)
    except ShardChatError as exc:
        return str(exc)
    except Exception as exc:  # a worker's bug must show as a line, not a page that waits
        log.exception("a Hub call failed")
        return _unexpected(exc)


def _unexpected(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"unexpected error: {type(exc).__name__}" + (f": {text[0]}" if text else "")


def _emit(signal: SignalInstance, *args: object) -> None:
    with contextlib.suppress(RuntimeError):  # the page went away meanwhile
        signal.emit(*args)
