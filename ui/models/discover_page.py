"""The model manager's "Discover" tab: find a GGUF model on Hugging Face, see how fast each
of its quants would run here, download one and load it.

It renders an `app.hub.discover_model.DiscoverModel` and redraws the part each
change names (the cells through ui.models.discover_cells); `DiscoverJobs`
(ui.models.discover_jobs) does the work on worker threads, the GUI thread only renders.
What LM Studio's Discover tab shows is the bar: results with their downloads and
likes, the card's summary and licence, every quant with its size and a verdict
for this machine (here the planner's own prediction: decode speed, time to first
token, share in VRAM, or that it exceeds RAM), the recommended quant marked, a
download with its speed and time left that can be paused, and "Load now" at the
end. A failure of any kind is one line in the theme's error colour.

A dialog with jobs of its own pauses its downloads when it closes, and they are
listed with Resume the next time, like unfinished downloads of an earlier run.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QShowEvent
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
    QVBoxLayout,
    QWidget,
)

from app.hub.catalogue import Kind, Sort
from app.hub.discover_downloads import DownloadState
from app.hub.discover_model import QUANT_COLUMNS, RESULT_COLUMNS, Change, SearchQuery
from app.screen_text.units import format_bytes
from app.stores.hub_store import DONE
from ui.models import discover_cells as cells
from ui.models.discover_cells import DOWNLOAD_COLUMNS, NOTES, ROW_KEY
from ui.models.discover_jobs import DiscoverJobs

__all__ = ["DOWNLOAD_COLUMNS", "DiscoverJobs", "DiscoverPage"]  # what the manager and tests use

KINDS: tuple[tuple[str, Kind | None], ...] = (
    ("Any kind", None), ("Text", "text"), ("MoE", "moe"), ("Vision", "vision"),
)  # fmt: skip
SORTS: tuple[tuple[str, Sort], ...] = (
    ("Most downloaded", "downloads"), ("Most liked", "likes"), ("Recently updated", "recent"),
)  # fmt: skip
CONTEXTS = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
BUDGET_DEBOUNCE_MS = 250  # a dragged slider plans once it rests, not at every step
MIB = 1 << 20
TOKEN_PROMPT = (
    "A token lets ShardChat download gated models. Make one (read access is enough) at\n"
    "huggingface.co → Settings → Access Tokens, accept the model's terms on its page, then\n"
    "paste the token here. It is kept in the system keyring (else in a private file)."
)


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
        self.results = cells.discover_table(RESULT_COLUMNS, stretch_column=0)
        self.title = QLabel("Choose a repository")
        self.meta = QLabel(wordWrap=True)
        self.summary = QLabel(wordWrap=True)
        self.budget_slider = QSlider(Qt.Orientation.Horizontal)
        self.budget_label = QLabel()
        self.context_box = QComboBox()
        self.note = QLabel(wordWrap=True)
        self.quants = cells.discover_table(QUANT_COLUMNS, stretch_column=NOTES)
        self.repo_status = QLabel(wordWrap=True)
        self.token_button = QPushButton("Add a Hugging Face token…")
        self.download_button = QPushButton("Download")
        self.progress = QProgressBar()
        self.download_status = QLabel(wordWrap=True)
        self.pause_button = QPushButton("Pause")
        self.cancel_button = QPushButton("Cancel")
        self.load_button = QPushButton("Load now")
        self.downloads_title = QLabel("<b>Downloads</b>")
        self.downloads = cells.discover_table(DOWNLOAD_COLUMNS, stretch_column=1)
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
        cells.say(self.search_status, model.search_activity.text, model.search_activity.problem)
        cells.fill_results(self.results, model.results)
        self._select_result(model.repo_id)

    def _update_repository(self) -> None:
        model = self.model
        details = model.details
        self.title.setText(model.repo_id or "Choose a repository")
        self.meta.setText(
            cells.meta_text(model) or "Search, then pick a repository to see its quants."
        )
        text = details.summary if details is not None else ""
        self.summary.setText(text or "No summary in the model card.")
        self.summary.setVisible(details is not None)
        self._update_plan_controls()
        cells.say(self.repo_status, model.repo_activity.text, model.repo_activity.problem)
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
        self.note.setStyleSheet(cells.muted_style(self.note))

    def _update_quants(self) -> None:
        cells.fill_quants(self.quants, self.model.quant_rows(), self.model.selected_path)
        self._update_download_row()

    def _update_download_row(self) -> None:
        """The selected quant's Download button, or its download: progress, Pause or Resume,
        Cancel, and Load now once it is in the model list."""
        row = self.model.selected_row()
        state = row.download if row is not None else None
        self.download_button.setVisible(state is None)
        self.download_button.setEnabled(row is not None and not row.problem)
        self.download_button.setText(cells.download_text(row.model if row is not None else None))
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
        cells.say(self.download_status, text, f"{text}: {state.error}" if failed and state else "")

    def _update_downloads(self) -> None:
        states = self.model.downloads()
        cells.fill_downloads(self.downloads, states, self.selected_download())
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


# -- layout helpers --------------------------------------------------------------------------------


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
