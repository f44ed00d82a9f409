"""The Discover page's state, without Qt: the search, the repository shown, how fast each
of its quants would run here, and the downloads.

The page (ui.models.discover_page) renders this object and its worker threads feed it;
nothing here touches the network, SQLite or Qt, so everything the page decides
is tested as plain Python. Each change names what changed (`Change`) to the
listeners, so a view redraws only its part: a download's progress, ten times a
second, does not redraw the quant table.

Answers come back from the workers in any order. Each request takes a ticket,
and an answer whose ticket is no longer the newest is dropped: a search typed
over, a repository clicked past, a budget moved again. Predictions are the
planner's (app.hub.remote_plans.predict_quants), tens of milliseconds per quant
with a GPU profile, so a budget or context change hands out a
`PredictionRequest` for a worker to run; the headers already read are reused,
never fetched again.

Downloads take no ticket: they are keyed by their id and outlive the search and
the repository they came from, so they are kept apart (app.hub.discover_downloads)
with their own rule for a late report; this model only shows each in its quant's
row and announces their changes with the rest.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from app.hub.catalogue import Kind, RepoDetails, RepoSummary, Sort
from app.hub.discover_downloads import DiscoverDownloads, DownloadState
from app.hub.gguf_files import RemoteModel
from app.hub.model_download import DownloadProgress
from app.hub.remote_plans import (
    PROMPT_TOKENS,
    Prediction,
    QuantReading,
    default_budget,
    predict_quants,
    recommended,
)
from app.screen_text.units import (
    format_bytes,
    format_count,
    seconds_range_text,
    speed_range_text,
)
from app.stores.hub_store import CANCELLED, FAILED
from engine.machine.profile import Profile
from engine.planning.prediction_range import sureness

SEARCHING = "searching…"
LISTING = "listing the repository…"
READING = "reading headers…"
PLANNING = "planning…"
NO_PROFILE_NOTE = (
    "No predictions yet: profile this machine (Tools → Profile this machine…) to see how "
    "fast each quant would run here."
)
NO_RESULTS = "no GGUF repository matches"
OFFLINE = "Offline: {reason}. Nothing is searched until you press Search."
QUANT_COLUMNS = ("Quant", "Size", "Speed", "First token", "In VRAM", "Notes")
RESULT_COLUMNS = ("Repository", "Kind", "Params", "Downloads", "Likes")
RECOMMENDED_MARK = "★"
EXCEEDS_RAM = "exceeds RAM"


class Change(enum.Enum):
    """The part of the page a change touches."""

    SEARCH = "search"  # the query's activity or its results
    REPOSITORY = "repository"  # the repository shown: which one, its card, its activity
    QUANTS = "quants"  # its quants: readings, predictions, the selected one
    DOWNLOADS = "downloads"  # a download started, moved, stopped or finished


Listener = Callable[[Change], None]


@dataclass(frozen=True)
class Activity:
    """What a part of the page says under it: what it is doing (muted), or one problem (red)."""

    text: str = ""
    problem: str = ""


@dataclass(frozen=True)
class SearchQuery:
    text: str
    kind: Kind | None = None
    sort: Sort = "downloads"


@dataclass(frozen=True)
class PredictionRequest:
    """Planning the quants read so far at one budget and context; run it on a worker."""

    ticket: int
    readings: tuple[QuantReading, ...]
    profile: Profile
    budget_bytes: int
    n_ctx: int

    def run(self) -> dict[str, Prediction | None]:
        return predict_quants(self.readings, self.profile, self.budget_bytes, self.n_ctx)


@dataclass(frozen=True)
class QuantRow:
    """One quant of the repository shown, with what is known of it here."""

    model: RemoteModel
    problem: str | None  # the file is not a usable GGUF (or parts are missing)
    prediction: Prediction | None
    recommended: bool
    download: DownloadState | None

    def cells(self) -> tuple[str, ...]:
        """The texts of QUANT_COLUMNS."""
        model, prediction = self.model, self.prediction
        quant = model.quant or PurePosixPath(model.path).name
        quant = f"{RECOMMENDED_MARK} {quant}" if self.recommended else quant
        speed = ttft = share = "—"
        if prediction is not None:
            speed = (
                speed_range_text(prediction.decode_tokens_per_s, prediction.sureness)
                if prediction.fits_ram
                else EXCEEDS_RAM
            )
            ttft = seconds_range_text(prediction.ttft_s, prediction.sureness)
            share = f"{prediction.resident_share:.0%}"
        return quant, format_bytes(model.download_size), speed, ttft, share, self.notes()

    def notes(self) -> str:
        if self.problem:
            return f"unusable: {self.problem}"
        said: list[str] = []
        if self.recommended:
            said.append("recommended")
        if self.download is not None and self.download.status != CANCELLED:
            said.append(self.download.note())
        prediction = self.prediction
        if prediction is not None and not prediction.fits_ram:
            said.append("needs more RAM than this machine has")
        elif prediction is not None and not prediction.readable:
            said.append("slower than reading pace")
        if self.model.is_split:
            said.append(f"{len(self.model.parts)} parts")
        if self.model.projector is not None:
            said.append("+ vision projector")
        return " · ".join(said)


class DiscoverModel:
    """Everything the Discover page shows; the page and its workers change it by method."""

    def __init__(
        self, profile: Profile | None = None, budget_bytes: int | None = None, n_ctx: int = 4096
    ) -> None:
        self.profile = profile
        self.n_ctx = n_ctx
        self.budget_bytes = self._clamped(
            budget_bytes if budget_bytes is not None else self._default_budget()
        )
        self.query: SearchQuery | None = None
        self.results: list[RepoSummary] = []
        self.search_activity = Activity()
        self.offline = False  # the last search found no connection: nothing searches by itself
        self.repo_id: str | None = None
        self.summary: RepoSummary | None = None  # the search result the repository came from
        self.details: RepoDetails | None = None
        self.readings: list[QuantReading] | None = None
        self.repo_activity = Activity()
        self.predictions: dict[str, Prediction | None] = {}
        self.recommended_path: str | None = None
        self.selected_path: str | None = None
        self._quant_picked = False  # the person chose a quant: predictions do not move it
        self._downloads = DiscoverDownloads()
        self._tickets = {"search": 0, "repository": 0, "plan": 0}
        self._listeners: list[Listener] = []

    # -- listening -------------------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _changed(self, *changes: Change) -> None:
        for change in changes:
            for listener in list(self._listeners):
                listener(change)

    def _ticket(self, name: str) -> int:
        self._tickets[name] += 1
        return self._tickets[name]

    def _is_current(self, name: str, ticket: int) -> bool:
        return self._tickets[name] == ticket

    # -- searching -------------------------------------------------------------------------------

    def begin_search(self, query: SearchQuery) -> int:
        """A search is on its way; its answer must bring back the returned ticket."""
        self.query = query
        self.search_activity = Activity(text=SEARCHING)
        self._changed(Change.SEARCH)
        return self._ticket("search")

    def show_results(self, ticket: int, results: Sequence[RepoSummary]) -> bool:
        """The search's answer; False (and nothing changes) when a newer search was asked."""
        if not self._is_current("search", ticket):
            return False
        self.results = list(results)
        self.offline = False
        text = self.query.text if self.query else ""
        empty = f"{NO_RESULTS} {text!r}" if text else NO_RESULTS
        self.search_activity = Activity(text="" if results else empty)
        self._changed(Change.SEARCH)
        return True

    def search_failed(self, ticket: int, message: str) -> bool:
        if not self._is_current("search", ticket):
            return False
        self.search_activity = Activity(problem=message)
        self._changed(Change.SEARCH)
        return True

    def went_offline(self, ticket: int, reason: str) -> bool:
        """The search found no connection to the Hub: the page says so, and no search starts
        by itself (on opening, on a new kind or order) until the person presses Search."""
        if not self._is_current("search", ticket):
            return False
        self.query, self.results, self.offline = None, [], True
        self.search_activity = Activity(problem=OFFLINE.format(reason=reason))
        self._changed(Change.SEARCH)
        return True

    # -- the repository shown --------------------------------------------------------------------

    def open_repository(self, repo_id: str) -> int | None:
        """Show this repository: a ticket for listing it, or None when it is already shown
        (or being listed), so clicking it again fetches nothing."""
        if repo_id == self.repo_id and not self.repo_activity.problem:
            return None
        self.repo_id = repo_id
        self.summary = next((r for r in self.results if r.repo_id == repo_id), None)
        self.details, self.readings = None, None
        self.predictions, self.recommended_path, self.selected_path = {}, None, None
        self._quant_picked = False
        self.repo_activity = Activity(text=LISTING)
        self._ticket("plan")  # predictions for the last repository are of no use now
        self._changed(Change.REPOSITORY, Change.QUANTS)
        return self._ticket("repository")

    def show_details(self, ticket: int, details: RepoDetails) -> bool:
        """The repository's files are listed; its headers are read next."""
        if not self._is_current("repository", ticket):
            return False
        self.details = details
        self.selected_path = details.models[0].path if details.models else None
        no_models = f"{details.repo_id} has no GGUF model files"
        self.repo_activity = (
            Activity(text=READING) if details.models else Activity(problem=no_models)
        )
        self._changed(Change.REPOSITORY, Change.QUANTS)
        return True

    def show_readings(
        self, ticket: int, readings: Sequence[QuantReading]
    ) -> PredictionRequest | None:
        """Every quant's header was read: the planning to run next (None without a profile)."""
        if not self._is_current("repository", ticket):
            return None
        self.readings = list(readings)
        self.repo_activity = Activity()
        request = self._replan()
        self._changed(Change.REPOSITORY, Change.QUANTS)
        return request

    def repository_failed(self, ticket: int, message: str) -> bool:
        """Listing the repository or reading its headers failed: one line says why; what
        was listed (the card, the quants and their sizes) stays shown."""
        if not self._is_current("repository", ticket):
            return False
        self.repo_activity = Activity(problem=message)
        self._changed(Change.REPOSITORY, Change.QUANTS)
        return True

    # -- planning --------------------------------------------------------------------------------

    @property
    def vram_total_bytes(self) -> int:
        """The profiled GPU's memory: the top of the budget; 0 without a GPU (or profile)."""
        gpu = self.profile.gpu if self.profile is not None else None
        return gpu.vram_total_bytes if gpu is not None else 0

    @property
    def planning(self) -> bool:
        """Predictions for the current budget and context are being computed."""
        return self.repo_activity.text == PLANNING

    def use_machine(
        self, profile: Profile | None, budget_bytes: int | None, n_ctx: int
    ) -> PredictionRequest | None:
        """Plan with this profile, budget (None: the profile's default) and context, as the
        app's loads are planned now; None when that is what the figures are for already."""
        unchanged = profile is self.profile and n_ctx == self.n_ctx
        self.profile, self.n_ctx = profile, max(1, n_ctx)
        budget = self._clamped(budget_bytes if budget_bytes is not None else self._default_budget())
        if unchanged and budget == self.budget_bytes:
            return None
        self.budget_bytes = budget
        return self._replan_and_say()

    def set_budget(self, budget_bytes: int) -> PredictionRequest | None:
        """The VRAM budget moved: plan the quants again (the headers are kept)."""
        budget_bytes = self._clamped(budget_bytes)
        if budget_bytes == self.budget_bytes:
            return None
        self.budget_bytes = budget_bytes
        return self._replan_and_say()

    def set_context(self, n_ctx: int) -> PredictionRequest | None:
        if n_ctx == self.n_ctx or n_ctx <= 0:
            return None
        self.n_ctx = n_ctx
        return self._replan_and_say()

    def show_predictions(
        self, request: PredictionRequest, predictions: dict[str, Prediction | None]
    ) -> bool:
        """The planner's answer; dropped when the budget, context or repository moved since."""
        if not self._is_current("plan", request.ticket):
            return False
        self.predictions = dict(predictions)
        models = list(self.details.models) if self.details else []
        best = recommended(models, lambda m: self.predictions.get(m.path))
        self.recommended_path = best.path if best else None
        if best is not None and not self._quant_picked:
            self.selected_path = best.path  # until the person picks one, the recommended one
        if self.planning:
            self.repo_activity = Activity()
        self._changed(Change.REPOSITORY, Change.QUANTS)
        return True

    def planning_failed(self, request: PredictionRequest, message: str) -> bool:
        if not self._is_current("plan", request.ticket):
            return False
        self.repo_activity = Activity(problem=message)
        self._changed(Change.REPOSITORY)
        return True

    def prediction_note(self) -> str:
        """What the figures are for, or why there are none."""
        if self.profile is None:
            return NO_PROFILE_NOTE
        vram = (
            f"{format_bytes(self.budget_bytes)} of VRAM" if self.vram_total_bytes
            else "the CPU (no GPU in the profile)"
        )  # fmt: skip
        spread = sureness(self.profile).basis()
        return (
            f"Predicted for this machine with {vram}, a {self.n_ctx:,}-token context and a "
            f"{PROMPT_TOKENS}-token prompt; ranges {spread}."
        )

    def _replan_and_say(self) -> PredictionRequest | None:
        request = self._replan()
        self._changed(Change.REPOSITORY, Change.QUANTS)
        return request

    def _replan(self) -> PredictionRequest | None:
        """A request to plan the readings at the present budget and context, if there is
        anything to plan and a profile to plan with; older answers become stale."""
        ticket = self._ticket("plan")
        if self.profile is None or not self.readings:
            self.predictions, self.recommended_path = {}, None
            if self.planning:
                self.repo_activity = Activity()
            return None
        if not self.repo_activity.problem:
            self.repo_activity = Activity(text=PLANNING)
        return PredictionRequest(
            ticket, tuple(self.readings), self.profile, self.budget_bytes, self.n_ctx
        )

    def _default_budget(self) -> int:
        return default_budget(self.profile) if self.profile is not None else 0

    def _clamped(self, budget_bytes: int) -> int:
        return max(0, min(budget_bytes, self.vram_total_bytes))

    # -- the quants ------------------------------------------------------------------------------

    def quant_rows(self) -> list[QuantRow]:
        """The repository's quants, smallest first, with what is known of each."""
        if self.details is None:
            return []
        problems = {r.model.path: r.problem for r in self.readings or ()}
        return [
            QuantRow(
                model,
                problems.get(model.path) or _missing(model),
                self.predictions.get(model.path),
                model.path == self.recommended_path,
                self.download_for(self.details.repo_id, model.path),
            )  # fmt: skip
            for model in self.details.models
        ]

    def select_quant(self, path: str | None) -> None:
        """The person chose a quant; later predictions leave the choice alone."""
        self._quant_picked = path is not None
        if path == self.selected_path:
            return
        self.selected_path = path
        self._changed(Change.QUANTS)

    def selected_quant(self) -> RemoteModel | None:
        models = self.details.models if self.details else ()
        return next((m for m in models if m.path == self.selected_path), None)

    def selected_row(self) -> QuantRow | None:
        return next((r for r in self.quant_rows() if r.model.path == self.selected_path), None)

    # -- downloads: kept by app.hub.discover_downloads, announced here -------------------------

    def downloads(self) -> list[DownloadState]:
        """Downloads of this session and unfinished ones of earlier runs, newest first."""
        return self._downloads.shown()

    def download(self, download_id: int) -> DownloadState | None:
        return self._downloads.get(download_id)

    def download_for(self, repo_id: str, model_path: str) -> DownloadState | None:
        """The newest download of this model that was not cancelled."""
        return self._downloads.newest_of(repo_id, model_path)

    def track(self, state: DownloadState) -> None:
        """A download started, joined, ended, or read back from the store."""
        self._downloads.track(state)
        self._changed(Change.DOWNLOADS, Change.QUANTS)

    def add_unfinished(self, states: Sequence[DownloadState]) -> None:
        """Unfinished downloads of earlier runs; one this session already follows stays as is."""
        if self._downloads.add_unfinished(states):
            self._changed(Change.DOWNLOADS, Change.QUANTS)

    def show_progress(self, progress: DownloadProgress) -> None:
        """A running download's figures (ten times a second at most): only the downloads
        redraw, never the quant table."""
        if self._downloads.show_progress(progress):
            self._changed(Change.DOWNLOADS)

    def mark(self, download_id: int, status: str, error: str | None = None) -> None:
        """A download's status changed here (asked to run, pause or stop) before the worker
        reports back; it keeps its figures."""
        if self._downloads.mark(download_id, status, error):
            self._changed(Change.DOWNLOADS, Change.QUANTS)

    def download_failed(self, download_id: int, message: str) -> None:
        self.mark(download_id, FAILED, message)

    def joined(self, state: DownloadState) -> None:
        """Asked to download a model that is downloading already: the running job is followed,
        no second one starts, and the repository's line says why nothing new appeared."""
        self._downloads.follow(state)
        self.repo_activity = Activity(text=f"{state.readable_name} is downloading already")
        self._changed(Change.REPOSITORY, Change.DOWNLOADS, Change.QUANTS)

    def refuse(self, message: str) -> None:
        """An action on the repository shown was refused (a download that cannot start)."""
        self.repo_activity = Activity(problem=message)
        self._changed(Change.REPOSITORY)


def result_cells(result: RepoSummary) -> tuple[str, ...]:
    """The texts of RESULT_COLUMNS for one search result."""
    name = f"{result.repo_id}  (gated)" if result.gated else result.repo_id
    params = format_count(result.n_params) if result.n_params else "—"
    kind = {"text": "text", "moe": "MoE", "vision": "vision"}[result.kind]
    return name, kind, params, format_count(result.downloads), format_count(result.likes)


def _missing(model: RemoteModel) -> str | None:
    return f"{model.missing_parts} part(s) missing" if model.missing_parts else None
