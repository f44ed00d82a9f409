"""What the batch panel does: scan a chosen folder, run the job on the engine worker, follow it.

The job shares the worker with the chat: between the job's decode steps the
worker serves waiting chat requests first, so a reply never waits for a
folder. Pause cancels the job request (summaries already written stay, the
job store remembers the rest) and Resume submits the same job again, with the
settings it started with, so it carries on where it stopped. The controller
answers only the requests it made; the chat's events pass it by.

Scanning runs on the GUI thread: it only lists the folder (no file is read),
which takes milliseconds for a folder of hundreds of documents.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.engine_host.engine_client import EngineClient
from app.engine_host.events import JobFinished, JobProgressed, RequestFailed
from app.summaries.batch_view import (
    BatchView,
    cancelled,
    dropped_folder,
    failed,
    paused,
    shown_output_folder,
    started,
    with_folder,
    with_message,
    with_outcome,
    with_output_folder,
    with_progress,
)
from app.summaries.document_scan import scan_folder
from app.summaries.summary_job import SummarySettings
from engine.errors import BadInputError
from ui.engine_bridge import EngineBridge
from ui.summaries.batch_panel import BatchPanel

BUSY = "a batch is under way; cancel it before choosing other folders or settings"


class BatchController(QObject):
    view_changed = Signal(object)  # BatchView, after every change (a dock title, a status bar)
    message = Signal(str)  # one line for the status bar when a batch ends or fails

    def __init__(
        self,
        panel: BatchPanel,
        worker: EngineClient,
        bridge: EngineBridge,
        parallel: int | None = None,
    ) -> None:
        """`parallel`: sequences decoded together (None: the job's default)."""
        super().__init__(panel)
        self.panel, self.worker, self._parallel = panel, worker, parallel
        self.view = BatchView(max_words=SummarySettings().max_words)
        self._request: int | None = None  # the job request whose outcome we wait for
        self._ours: set[int] = set()  # every job request we made; progress of any is shown
        self._settings: SummarySettings | None = None  # the running job's, for Resume
        self._connect(bridge)
        self._show(self.view)

    def _connect(self, bridge: EngineBridge) -> None:
        panel = self.panel
        panel.folder_chosen.connect(self.choose_folder)
        panel.paths_dropped.connect(self.take_dropped)
        panel.output_chosen.connect(self.choose_output_folder)
        panel.instruction_edited.connect(lambda text: self._edit(instruction=text))
        panel.max_words_edited.connect(lambda n: self._edit(max_words=n))
        panel.start_requested.connect(self.start)
        panel.pause_requested.connect(self.pause)
        panel.resume_requested.connect(self.resume)
        panel.cancel_requested.connect(self.cancel)
        panel.notice.connect(lambda text: self._show(with_message(self.view, text)))
        bridge.job_progressed.connect(self._on_progress)
        bridge.job_finished.connect(self._on_finished)
        bridge.request_failed.connect(self._on_failed)

    # --- what the person asks for ---

    def choose_folder(self, folder: Path) -> None:
        """List the folder's documents as pending, before anything runs."""
        if not self.view.can_change_folder:
            self._show(with_message(self.view, BUSY))
            return
        try:
            scan = scan_folder(folder)
        except BadInputError as exc:
            self._show(with_message(self.view, str(exc)))
            return
        self._show(with_folder(self.view, scan))

    def take_dropped(self, paths: list[Path]) -> None:
        """One dropped folder is chosen; a file or several items are refused with why."""
        try:
            folder = dropped_folder(paths)
        except BadInputError as exc:
            self._show(with_message(self.view, str(exc)))
            return
        self.choose_folder(folder)

    def choose_output_folder(self, output_folder: Path) -> None:
        if not self.view.can_change_folder:
            self._show(with_message(self.view, BUSY))
            return
        self._show(with_output_folder(self.view, output_folder))

    def start(self) -> None:
        if not self.view.can_start:
            return
        self._settings = self._settings_chosen()
        self._submit(self._settings)

    def pause(self) -> None:
        """Stop the job where it is; what it wrote stays, and Resume picks up the rest."""
        if not self.view.can_pause or self._request is None:
            return
        self.worker.cancel(self._request)
        self._show(paused(self.view))

    def resume(self) -> None:
        if not self.view.can_resume or self._settings is None:
            return
        self._submit(self._settings)

    def cancel(self) -> None:
        if not self.view.can_cancel:
            return
        if self._request is not None:
            self.worker.cancel(self._request)
        self._show(cancelled(self.view))

    @property
    def request_id(self) -> int | None:
        """The job request in flight, if any (the chat's requests are never ours)."""
        return self._request

    def output_folder(self) -> Path | None:
        """Where this batch's summaries go (the chosen folder, or `<folder>-summaries`)."""
        return shown_output_folder(self.view)

    def _submit(self, settings: SummarySettings) -> None:
        view = self.view
        assert view.folder is not None  # can_start needs one; a paused job's folder holds still
        self._request = self.worker.summarize(view.folder, view.output_folder, settings)
        self._ours.add(self._request)
        self._show(started(view))

    def _settings_chosen(self) -> SummarySettings:
        defaults = SummarySettings()
        return replace(
            defaults,
            prompt=self.view.instruction.strip() or None,
            max_words=self.view.max_words or defaults.max_words,
            parallel=self._parallel,
        )

    def _edit(self, **settings: object) -> None:
        if self.view.can_change_folder:
            self._show(replace(self.view, **settings))  # type: ignore[arg-type]
        else:
            self._show(with_message(self.view, BUSY))  # (the inputs are disabled meanwhile)

    # --- what the engine reports ---

    def _on_progress(self, event: JobProgressed) -> None:
        if event.request_id in self._ours:
            self._show(with_progress(self.view, event.progress))

    def _on_finished(self, event: JobFinished) -> None:
        self._ours.discard(event.request_id)
        if event.request_id != self._request:
            return  # a paused run ending after Resume started the next one
        self._request = None
        self._show(with_outcome(self.view, event.outcome))
        self.message.emit(f"Batch: {self.view.message}")

    def _on_failed(self, event: RequestFailed) -> None:
        self._ours.discard(event.request_id)
        if event.request_id != self._request:
            return
        self._request = None
        self._show(failed(self.view, f"The batch could not run: {event.message}"))
        self.message.emit(self.view.message)

    def _show(self, view: BatchView) -> None:
        self.view = view
        self.panel.show_batch(view)
        self.view_changed.emit(view)
