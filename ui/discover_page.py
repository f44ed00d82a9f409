"""The model manager's "Discover" tab: find a GGUF model on Hugging Face, see how fast each
of its quants would run here, download one and load it.

It renders an `app.hub.discover_model.DiscoverModel` and redraws the part each
change names; `DiscoverJobs` does the work. What LM Studio's Discover tab shows
is the bar: results with their downloads and likes, the card's summary and
licence, every quant with its size and a verdict for this machine (here the
planner's own prediction: decode speed, time to first token, share in VRAM, or
that it exceeds RAM), the recommended quant marked, a download with its speed
and time left that can be paused, and "Load now" at the end.

Threads: every Hub call (search, listing a repository, reading headers by range,
downloading) and the planning of a repository's quants runs on a worker of
`DiscoverJobs`, and the answer comes back through a queued signal; the GUI
thread only renders. The hub store is opened inside each worker call (one
SQLite connection per thread). Answers for a search typed over or a repository
clicked past are dropped by the model's tickets. A failure of any kind is one
line in the theme's error colour.

Downloads outlive the dialog when the desktop keeps the jobs (ui.desktop);
a dialog with jobs of its own pauses its downloads when it closes, and they are
listed with Resume the next time, like unfinished downloads of an earlier run.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

from PySide6.QtCore import QObject, Qt, QTimer, Signal, SignalInstance
from PySide6.QtGui import QColor, QPalette, QShowEvent
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSlider,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.hub.catalogue import Catalogue, Kind, RepoDetails, RepoSummary, Sort
from app.hub.discover_model import (
    QUANT_COLUMNS,
    RESULT_COLUMNS,
    Change,
    DiscoverModel,
    DownloadState,
    PredictionRequest,
    QuantRow,
    SearchQuery,
    result_cells,
)
from app.hub.file_transfer import DEFAULT_POLICY, DownloadStopped, TransferControl, TransferPolicy
from app.hub.gguf_files import RemoteModel
from app.hub.hub_errors import HubOfflineError
from app.hub.hub_settings import models_dir, save_token
from app.hub.model_download import (
    DownloadManager,
    DownloadProgress,
    discard_download,
    run_download,
    start_or_resume,
)
from app.hub.remote_plans import Prediction, QuantReading, read_quants
from app.stores.hub_store import CANCELLED, DONE, PAUSED, QUEUED, UNFINISHED, HubStore
from app.units import format_bytes
from engine.errors import ShardChatError
from engine.machine.profile import Profile
from ui.tables import read_only_table
from ui.theme import DARK, LIGHT, Theme, error_style

log = logging.getLogger(__name__)

SEARCH_LIMIT = 40
KINDS: tuple[tuple[str, Kind | None], ...] = (
    ("Any kind", None), ("Text", "text"), ("MoE", "moe"), ("Vision", "vision"),
)  # fmt: skip
SORTS: tuple[tuple[str, Sort], ...] = (
    ("Most downloaded", "downloads"), ("Most liked", "likes"), ("Recently updated", "recent"),
)  # fmt: skip
CONTEXTS = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
BUDGET_DEBOUNCE_MS = 250  # a dragged slider plans once it rests, not at every step
MIB = 1 << 20
ROW_KEY = Qt.ItemDataRole.UserRole  # what a row stands for: repository, quant path, download id
RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
QUANT, SIZE, SPEED, FIRST_TOKEN, IN_VRAM, NOTES = range(len(QUANT_COLUMNS))
DOWNLOAD_COLUMNS = ("Download", "Progress")
TOKEN_PROMPT = (
    "A token lets ShardChat download gated models. Make one (read access is enough) at\n"
    "huggingface.co → Settings → Access Tokens, accept the model's terms on its page, then\n"
    "paste the token here. It is kept in the system keyring (else in a private file)."
)

T = TypeVar("T")


class DiscoverJobs(QObject):
    """The Discover page's work on worker threads; answers go into the model on the GUI thread.

    Browsing (search, listing, headers) and starting downloads share a small pool;
    planning has its own worker so a moved slider never waits behind the network;
    downloads run on a pool of their own. `DownloadManager` keeps one job per
    model: asking again for a model that is downloading joins it.
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
        self.policy = policy
        self.manager = DownloadManager()
        self._browser = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hub-browse")
        self._planner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hub-plan")
        self._transfers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="hub-download")
        self._starting = threading.Lock()  # one start_or_resume at a time: no twin jobs
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
        control, is_new = self.manager.control_for(download_id)
        if not is_new:  # still stopping after a pause: go on once it has stopped
            self._resume_when_stopped.add(download_id)
            return
        self.model.mark(download_id, QUEUED)
        self._submit(self._transfers, self._run, download_id, control)

    def pause(self, download_id: int) -> None:
        self._resume_when_stopped.discard(download_id)
        if download_id in self.manager.running():
            self.manager.pause(download_id)
            self.model.mark(download_id, PAUSED)

    def cancel(self, download_id: int) -> None:
        """Stop a download and delete what it fetched of the file in progress."""
        self._resume_when_stopped.discard(download_id)
        if download_id in self.manager.running():
            self.manager.cancel(download_id)
        else:
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
        for download_id in self.manager.running():
            self.manager.pause(download_id)
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
        _emit(self._read, ticket, _attempt(lambda: _read_headers(catalogue, details)))

    def _predict(self, request: PredictionRequest) -> None:
        _emit(self._planned, request, _attempt(request.run))

    def _start(self, details: RepoDetails, model: RemoteModel) -> None:
        try:
            with self._starting, HubStore() as store:
                download = start_or_resume(store, details, model, models_dir())
                control, is_new = self.manager.control_for(download.id)
        except ShardChatError as exc:
            _emit(self._refused, str(exc))
            return
        except Exception as exc:  # the page must say something, whatever went wrong
            log.exception("starting the download of %s/%s failed", details.repo_id, model.path)
            _emit(self._refused, _unexpected(exc))
            return
        state = DownloadState.of(download)
        if not is_new:
            _emit(self._joined, state)
            return
        _emit(self._tracked, replace(state, status=QUEUED, error=None))
        self._submit(self._transfers, self._run, download.id, control)

    def _run(self, download_id: int, control: TransferControl) -> None:
        outcome: DownloadState | str
        try:
            catalogue = Catalogue()
            with HubStore() as store:
                try:
                    done = run_download(
                        store, download_id, catalogue.endpoint, catalogue.auth_headers(),
                        lambda progress: _emit(self._progressed, progress), control, self.policy,
                    )  # fmt: skip
                    outcome = DownloadState.of(done)
                except DownloadStopped:
                    outcome = DownloadState.of(store.download(download_id), running_here=False)
                except ShardChatError as exc:
                    outcome = str(exc)
        except Exception as exc:
            log.exception("download %d failed", download_id)
            outcome = _unexpected(exc)
        finally:
            self.manager.finished(download_id)  # before the GUI hears: Resume may follow
        if isinstance(outcome, str):
            _emit(self._failed, download_id, outcome)
        else:
            _emit(self._tracked, outcome)

    def _discard(self, download_id: int) -> None:
        try:
            with HubStore() as store:
                discard_download(store, store.download(download_id))
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


class DiscoverPage(QWidget):
    """Search, a repository's quants with this machine's predictions, and downloads."""

    load_requested = Signal(str, object)  # model path, projector path or None

    def __init__(self, jobs: DiscoverJobs, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.jobs = jobs
        self.model = jobs.model
        self.search_box = QLineEdit(placeholderText="Search GGUF models on Hugging Face…")
        self.kind_box = _combo([label for label, _kind in KINDS])
        self.sort_box = _combo([label for label, _sort in SORTS])
        self.search_button = QPushButton("Search")
        self.search_status = QLabel(wordWrap=True)
        self.results = _table(RESULT_COLUMNS, stretch_column=0)
        self.title = QLabel("Choose a repository")
        self.meta = QLabel(wordWrap=True)
        self.summary = QLabel(wordWrap=True)
        self.budget_slider = QSlider(Qt.Orientation.Horizontal)
        self.budget_label = QLabel()
        self.context_box = QComboBox()
        self.note = QLabel(wordWrap=True)
        self.quants = _table(QUANT_COLUMNS, stretch_column=NOTES)
        self.repo_status = QLabel(wordWrap=True)
        self.token_button = QPushButton("Add a Hugging Face token…")
        self.download_button = QPushButton("Download")
        self.progress = QProgressBar()
        self.download_status = QLabel(wordWrap=True)
        self.pause_button = QPushButton("Pause")
        self.cancel_button = QPushButton("Cancel")
        self.load_button = QPushButton("Load now")
        self.downloads_title = QLabel("<b>Downloads</b>")
        self.downloads = _table(DOWNLOAD_COLUMNS, stretch_column=1)
        self.resume_selected = QPushButton("Resume")
        self.pause_selected = QPushButton("Pause")
        self.cancel_selected = QPushButton("Cancel")
        self.load_selected = QPushButton("Load now")
        self._budget_timer = QTimer(self, singleShot=True, interval=BUDGET_DEBOUNCE_MS)
        self._lay_out()
        self._name_for_screen_readers()
        self._connect()
        self.model.subscribe(self._on_change)
        for change in Change:
            self._on_change(change)
        self.jobs.load_unfinished()

    # -- building ------------------------------------------------------------------------------

    def _lay_out(self) -> None:
        search_row = QHBoxLayout()
        search_row.addWidget(self.search_box, stretch=1)
        search_row.addWidget(self.kind_box)
        search_row.addWidget(self.sort_box)
        search_row.addWidget(self.search_button)
        left = QWidget()
        left_column = QVBoxLayout(left)
        left_column.setContentsMargins(0, 0, 0, 0)
        left_column.addWidget(self.results, stretch=1)
        left_column.addWidget(self.search_status)
        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(self._repository_pane())
        splitter.setSizes([400, 600])
        splitter.setChildrenCollapsible(False)
        column = QVBoxLayout(self)
        column.addLayout(search_row)
        column.addWidget(splitter, stretch=1)
        column.addWidget(self.downloads_title)
        column.addWidget(self.downloads)
        column.addLayout(_row(self.resume_selected, self.pause_selected, self.cancel_selected,
                              self.load_selected))  # fmt: skip
        self.downloads.setMaximumHeight(110)
        self.title.setStyleSheet("font-size: 15pt; font-weight: 600;")
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.progress.setTextVisible(True)
        for button in self._buttons():
            button.setAutoDefault(False)  # Enter in the search box searches, nothing else

    def _repository_pane(self) -> QWidget:
        pane = QWidget()
        column = QVBoxLayout(pane)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.title)
        column.addWidget(self.meta)
        column.addWidget(self.summary)
        plan_row = QHBoxLayout()
        plan_row.addWidget(QLabel("VRAM"))
        plan_row.addWidget(self.budget_slider, stretch=1)
        plan_row.addWidget(self.budget_label)
        plan_row.addSpacing(12)
        plan_row.addWidget(QLabel("Context"))
        plan_row.addWidget(self.context_box)
        column.addLayout(plan_row)
        column.addWidget(self.note)
        column.addWidget(self.quants, stretch=1)
        status_row = QHBoxLayout()
        status_row.addWidget(self.repo_status, stretch=1)
        status_row.addWidget(self.token_button, alignment=Qt.AlignmentFlag.AlignTop)
        column.addLayout(status_row)
        download_row = QHBoxLayout()
        download_row.addWidget(self.download_button)
        download_row.addWidget(self.progress, stretch=1)
        for button in (self.pause_button, self.cancel_button, self.load_button):
            download_row.addWidget(button)
        download_row.addStretch(0)  # takes the row's room while no progress is shown
        self.download_button.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
        column.addLayout(download_row)
        column.addWidget(self.download_status)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.meta.setTextFormat(Qt.TextFormat.RichText)
        self.meta.setOpenExternalLinks(True)
        self.budget_slider.setPageStep(1024)
        self.budget_label.setMinimumWidth(70)
        return pane

    def _buttons(self) -> tuple[QPushButton, ...]:
        return (
            self.search_button, self.token_button, self.download_button, self.pause_button,
            self.cancel_button,
            self.load_button, self.resume_selected, self.pause_selected, self.cancel_selected,
            self.load_selected,
        )  # fmt: skip

    def _name_for_screen_readers(self) -> None:
        named = (
            (self.search_box, "Search Hugging Face"), (self.kind_box, "Kind of model"),
            (self.sort_box, "Order of results"), (self.search_button, "Search"),
            (self.search_status, "Search status"), (self.results, "Repositories found"),
            (self.title, "Repository"), (self.meta, "Repository facts"),
            (self.summary, "Model card summary"), (self.budget_slider, "VRAM budget to plan for"),
            (self.budget_label, "VRAM budget planned for"),
            (self.context_box, "Context length to plan for"), (self.note, "What the figures mean"),
            (self.quants, "Quants of the repository"), (self.repo_status, "Repository status"),
            (self.token_button, "Add a Hugging Face token"),
            (self.download_button, "Download the selected quant"),
            (self.progress, "Download progress"), (self.download_status, "Download status"),
            (self.pause_button, "Pause or resume the download"),
            (self.cancel_button, "Cancel the download"),
            (self.load_button, "Load the downloaded model now"),
            (self.downloads, "Downloads"),
            (self.resume_selected, "Resume the selected download"),
            (self.pause_selected, "Pause the selected download"),
            (self.cancel_selected, "Cancel the selected download"),
            (self.load_selected, "Load the selected download now"),
        )  # fmt: skip
        for widget, name in named:
            widget.setAccessibleName(name)
        for box, name in ((self.kind_box, "Kinds"), (self.sort_box, "Orders"),
                          (self.context_box, "Context lengths")):  # fmt: skip
            box.view().setAccessibleName(name)

    def _connect(self) -> None:
        self.search_box.returnPressed.connect(self.search)
        self.search_button.clicked.connect(self.search)
        self.kind_box.activated.connect(lambda _index: self._search_again())
        self.sort_box.activated.connect(lambda _index: self._search_again())
        self.results.itemSelectionChanged.connect(self._open_selected_result)
        self.quants.itemSelectionChanged.connect(self._select_quant)
        self.budget_slider.valueChanged.connect(self._on_budget_moved)
        self._budget_timer.timeout.connect(self._apply_budget)
        self.context_box.activated.connect(self._apply_context)
        self.token_button.clicked.connect(self.ask_for_token)
        self.download_button.clicked.connect(self.download_selected)
        self.pause_button.clicked.connect(lambda: self._pause_or_resume(self._quant_download()))
        self.cancel_button.clicked.connect(lambda: self._cancel(self._quant_download()))
        self.load_button.clicked.connect(lambda: self._load(self._quant_download()))
        self.downloads.itemSelectionChanged.connect(self._show_download_buttons)
        self.resume_selected.clicked.connect(lambda: self._resume(self.selected_download()))
        self.pause_selected.clicked.connect(lambda: self._pause(self.selected_download()))
        self.cancel_selected.clicked.connect(lambda: self._cancel(self.selected_download()))
        self.load_selected.clicked.connect(lambda: self._load(self.selected_download()))

    def detach(self) -> None:
        """Stop following the model (the dialog is closing; the model may live on)."""
        self.model.unsubscribe(self._on_change)
        self._budget_timer.stop()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt's name
        """The first time the tab is shown, list the most downloaded GGUF models, as LM
        Studio opens on its picks; offline, it says so and waits for Search."""
        super().showEvent(event)
        if self.model.query is None and not self.model.offline:
            self.search()

    # -- actions -------------------------------------------------------------------------------

    def search(self) -> None:
        kind = KINDS[max(0, self.kind_box.currentIndex())][1]
        sort = SORTS[max(0, self.sort_box.currentIndex())][1]
        self.jobs.search(SearchQuery(self.search_box.text().strip(), kind, sort))

    def _search_again(self) -> None:
        if self.model.query is not None:
            self.search()

    def open_repository(self, repo_id: str) -> None:
        self.jobs.open_repository(repo_id)

    def download_selected(self) -> None:
        """Download the selected quant; a paused one resumes, a running one is joined."""
        row = self.model.selected_row()
        if row is None:
            return
        if row.download is not None and row.download.can_resume:
            self.jobs.resume(row.download.download_id)
            return
        self.jobs.download(row.model)

    def ask_for_token(self) -> None:
        """For a gated repository: keep a token, then list the repository again with it."""
        token, given = QInputDialog.getText(
            self, "Hugging Face token", TOKEN_PROMPT, QLineEdit.EchoMode.Password
        )
        if given and token.strip():
            self.jobs.save_token(token)

    def selected_download(self) -> DownloadState | None:
        items = self.downloads.selectedItems()
        return self.model.download(int(items[0].data(ROW_KEY))) if items else None

    def _open_selected_result(self) -> None:
        items = self.results.selectedItems()
        if items:
            self.open_repository(str(items[0].data(ROW_KEY)))

    def _select_quant(self) -> None:
        items = self.quants.selectedItems()
        self.model.select_quant(str(items[0].data(ROW_KEY)) if items else None)

    def _on_budget_moved(self, value: int) -> None:
        self.budget_label.setText(format_bytes(value * MIB))
        self._budget_timer.start()

    def _apply_budget(self) -> None:
        self.jobs.set_budget(self.budget_slider.value() * MIB)

    def _apply_context(self, index: int) -> None:
        n_ctx = self.context_box.itemData(index)
        if isinstance(n_ctx, int):
            self.jobs.set_context(n_ctx)

    def _quant_download(self) -> DownloadState | None:
        row = self.model.selected_row()
        return row.download if row is not None else None

    def _pause_or_resume(self, state: DownloadState | None) -> None:
        if state is not None and state.can_pause:
            self._pause(state)
        else:
            self._resume(state)

    def _pause(self, state: DownloadState | None) -> None:
        if state is not None and state.can_pause:
            self.jobs.pause(state.download_id)

    def _resume(self, state: DownloadState | None) -> None:
        if state is not None and state.can_resume:
            self.jobs.resume(state.download_id)

    def _cancel(self, state: DownloadState | None) -> None:
        if state is not None and state.can_cancel:
            self.jobs.cancel(state.download_id)

    def _load(self, state: DownloadState | None) -> None:
        if state is None or not state.can_load or state.model_file is None:
            return
        projector = state.projector_file
        has_projector = projector is not None and projector.is_file()
        self.load_requested.emit(str(state.model_file), str(projector) if has_projector else None)

    # -- rendering -----------------------------------------------------------------------------

    def _on_change(self, change: Change) -> None:
        {
            Change.SEARCH: self._update_results,
            Change.REPOSITORY: self._update_repository,
            Change.QUANTS: self._update_quants,
            Change.DOWNLOADS: self._update_downloads,
        }[change]()

    def _update_results(self) -> None:
        model = self.model
        _say(self.search_status, model.search_activity.text, model.search_activity.problem)
        self.results.blockSignals(True)
        self.results.setRowCount(len(model.results))
        for row, result in enumerate(model.results):
            for column, text in enumerate(result_cells(result)):
                item = QTableWidgetItem(text)
                item.setData(ROW_KEY, result.repo_id)
                if column > 1:
                    item.setTextAlignment(RIGHT)
                item.setToolTip(_result_tip(result.repo_id, result.license))
                self.results.setItem(row, column, item)
        self.results.blockSignals(False)
        self._select_result(model.repo_id)

    def _update_repository(self) -> None:
        model = self.model
        details = model.details
        self.title.setText(model.repo_id or "Choose a repository")
        self.meta.setText(_meta_text(model) or "Search, then pick a repository to see its quants.")
        text = details.summary if details is not None else ""
        self.summary.setText(text or "No summary in the model card.")
        self.summary.setVisible(details is not None)
        self._update_plan_controls()
        _say(self.repo_status, model.repo_activity.text, model.repo_activity.problem)
        summary = model.summary
        gated = (details is not None and details.gated) or (summary is not None and summary.gated)
        self.token_button.setVisible(bool(gated))
        self._select_result(model.repo_id)

    def _select_result(self, repo_id: str | None) -> None:
        """Keep the results' selection on the repository shown, without asking for it again."""
        rows = [r for r, result in enumerate(self.model.results) if result.repo_id == repo_id]
        self.results.blockSignals(True)
        if rows:
            self.results.selectRow(rows[0])
        else:
            self.results.clearSelection()
        self.results.blockSignals(False)

    def _update_plan_controls(self) -> None:
        model = self.model
        total_mib = model.vram_total_bytes // MIB
        self.budget_slider.blockSignals(True)
        self.budget_slider.setRange(0, total_mib)
        if not self._budget_timer.isActive() and not self.budget_slider.isSliderDown():
            self.budget_slider.setValue(model.budget_bytes // MIB)
        self.budget_slider.blockSignals(False)
        self.budget_slider.setEnabled(total_mib > 0)
        if not self._budget_timer.isActive():
            self.budget_label.setText(
                format_bytes(model.budget_bytes) if total_mib else "no GPU" if model.profile
                else "—"
            )  # fmt: skip
        self.context_box.blockSignals(True)
        self.context_box.clear()
        for n_ctx in sorted({*CONTEXTS, model.n_ctx}):
            self.context_box.addItem(f"{n_ctx:,} tokens", n_ctx)
        self.context_box.setCurrentIndex(self.context_box.findData(model.n_ctx))
        self.context_box.blockSignals(False)
        self.context_box.setEnabled(model.profile is not None)
        self.note.setText(model.prediction_note())
        self.note.setStyleSheet(_muted_style(self.note))

    def _update_quants(self) -> None:
        rows = self.model.quant_rows()
        self.quants.blockSignals(True)
        self.quants.setRowCount(len(rows))
        for index, row in enumerate(rows):
            self._draw_quant(index, row)
        chosen = [i for i, row in enumerate(rows) if row.model.path == self.model.selected_path]
        if chosen:
            self.quants.selectRow(chosen[0])
        else:
            self.quants.clearSelection()
        self.quants.blockSignals(False)
        self._update_download_row()

    def _draw_quant(self, index: int, row: QuantRow) -> None:
        tip = "\n".join(part.path for part in row.model.parts)
        if row.model.projector is not None:
            tip += f"\nvision projector: {row.model.projector.path}"
        prediction = row.prediction
        exceeds = prediction is not None and not prediction.fits_ram
        red = NOTES if row.problem else SPEED if exceeds else None
        for column, text in enumerate(row.cells()):
            item = QTableWidgetItem(text)
            item.setData(ROW_KEY, row.model.path)
            item.setToolTip(f"{tip}\n{text}" if column == NOTES and text else tip)
            if row.recommended:
                font = item.font()
                font.setBold(True)
                item.setFont(font)
            if column in (SIZE, SPEED, FIRST_TOKEN, IN_VRAM):
                item.setTextAlignment(RIGHT)
            if column == red:
                item.setForeground(_danger(self))
            self.quants.setItem(index, column, item)

    def _update_download_row(self) -> None:
        """The selected quant's Download button, or its download: progress, Pause or Resume,
        Cancel, and Load now once it is in the model list."""
        row = self.model.selected_row()
        state = row.download if row is not None else None
        self.download_button.setVisible(state is None)
        self.download_button.setEnabled(row is not None and not row.problem)
        self.download_button.setText(_download_text(row.model if row is not None else None))
        running = state is not None and state.status != DONE
        self.progress.setVisible(state is not None)
        self.progress.setRange(0, 1000)
        self.progress.setValue(int((state.fraction if state else 0) * 1000))
        self.progress.setFormat(f"{state.fraction:.0%}" if state else "")
        self.pause_button.setText("Resume" if state is not None and state.can_resume else "Pause")
        self.pause_button.setEnabled(state is not None and (state.can_pause or state.can_resume))
        self.cancel_button.setEnabled(state is not None and state.can_cancel)
        self.load_button.setEnabled(state is not None and state.can_load)
        self.pause_button.setVisible(running)
        self.cancel_button.setVisible(running)
        self.load_button.setVisible(state is not None)
        text = state.progress_text() if state is not None else ""
        failed = state is not None and state.error and state.can_resume
        _say(self.download_status, text, f"{text}: {state.error}" if failed and state else "")

    def _update_downloads(self) -> None:
        states = self.model.downloads()
        chosen = self.selected_download()
        self.downloads.blockSignals(True)
        self.downloads.setRowCount(len(states))
        for index, state in enumerate(states):
            progress = state.progress_text()
            if state.error and state.can_resume:
                progress = f"{progress}: {state.error}"
            for column, text in enumerate((state.name, progress)):
                item = QTableWidgetItem(text)
                item.setData(ROW_KEY, state.download_id)
                item.setToolTip(text)
                if column == 1 and state.error and state.can_resume:
                    item.setForeground(_danger(self))
                self.downloads.setItem(index, column, item)
        keep = [i for i, s in enumerate(states) if chosen and s.download_id == chosen.download_id]
        if keep or states:
            self.downloads.selectRow(keep[0] if keep else 0)
        self.downloads.blockSignals(False)
        for widget in (self.downloads_title, self.downloads, self.resume_selected,
                       self.pause_selected, self.cancel_selected, self.load_selected):  # fmt: skip
            widget.setVisible(bool(states))
        self._show_download_buttons()
        self._update_download_row()

    def _show_download_buttons(self) -> None:
        state = self.selected_download()
        self.resume_selected.setEnabled(state is not None and state.can_resume)
        self.pause_selected.setEnabled(state is not None and state.can_pause)
        self.cancel_selected.setEnabled(state is not None and state.can_cancel)
        self.load_selected.setEnabled(state is not None and state.can_load)


# -- plain helpers ---------------------------------------------------------------------------------


def _read_headers(catalogue: Catalogue, details: RepoDetails) -> list[QuantReading]:
    with HubStore() as store:
        return read_quants(
            details.models, catalogue.endpoint, details.repo_id, details.revision,
            catalogue.auth_headers(), store,
        )  # fmt: skip


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


def _meta_text(model: DiscoverModel) -> str:
    """Owner, licence, popularity, update, gating: one line under the repository's name."""
    details, summary = model.details, model.summary
    if model.repo_id is None:
        return ""
    facts = [f"by {model.repo_id.split('/')[0]}"]
    licence = (details.license if details else None) or (summary.license if summary else None)
    facts.append(f"licence {licence}" if licence else "no licence given")
    if summary is not None:
        facts.append(
            f"{_counted(summary.downloads, 'download')} · {_counted(summary.likes, 'like')}"
        )
        if summary.last_modified is not None:
            facts.append(f"updated {summary.last_modified:%Y-%m-%d}")
    if details is not None:
        facts.append(f"commit {details.revision[:7]}")
    if (details is not None and details.gated) or (summary is not None and summary.gated):
        facts.append("<b>gated</b>: accept its terms on the repository page")
    return " · ".join(facts)


def _download_text(model: RemoteModel | None) -> str:
    if model is None:
        return "Download"
    return f"Download {model.quant or 'file'} · {format_bytes(model.download_size)}"


def _counted(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _result_tip(repo_id: str, licence: str | None) -> str:
    return f"{repo_id}\nlicence: {licence or 'not given'}"


def _say(label: QLabel, text: str, problem: str) -> None:
    """One line under a part of the page: a problem in the theme's red, else muted words."""
    label.setStyleSheet(error_style(label) if problem else _muted_style(label))
    label.setText(problem or text)
    label.setVisible(bool(problem or text))


def _muted_style(widget: QWidget) -> str:
    """Secondary words in the theme's muted colour (picked as ui.theme.error_style picks
    its red: a label's own palette follows the last style sheet it was given)."""
    return f"color: {_theme_on(widget).muted_text};"


def _danger(widget: QWidget) -> QColor:
    return QColor(_theme_on(widget).danger)


def _theme_on(widget: QWidget) -> Theme:
    """The theme whose colours read on the widget's background, light or dark."""
    return DARK if widget.palette().color(QPalette.ColorRole.Window).lightness() < 128 else LIGHT


def _combo(labels: list[str]) -> QComboBox:
    box = QComboBox()
    box.addItems(labels)
    return box


def _row(*buttons: QPushButton) -> QHBoxLayout:
    row = QHBoxLayout()
    for button in buttons:
        row.addWidget(button)
    row.addStretch(1)
    return row


def _table(headers: tuple[str, ...], stretch_column: int) -> QTableWidget:
    """The manager's read-only table, drawn without grid lines or wrapped cells."""
    table = read_only_table(headers, stretch_column)
    table.setShowGrid(False)
    table.setWordWrap(False)
    return table
