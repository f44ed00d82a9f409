"""The "Models" dialog: import, pair, choose the default, load and remove GGUF models
("My models"), and get new ones from Hugging Face ("Discover", ui.models.discover_page).

"My models" renders `app.stores.model_library.ModelLibrary` (the list) and
`app.screen_text.model_summary` (what is said about one file); every change goes through
the library and the dialog then redraws from it, so the window never holds
state of its own. Refusals (a text file named .gguf, a projector given as a
model) are shown as their one-line reason under the list and change nothing.

The details pane (ui.models.model_details) reads each file off the GUI thread; an
import (ui.models.model_import) reads the files on the same worker, then lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.hub.discover_model import DiscoverModel
from app.screen_text.units import format_bytes
from app.stores.model_library import ModelEntry, ModelLibrary
from engine.model.inventory import read_inventory
from ui.model_drop import GgufDropFilter
from ui.models.discover_page import DiscoverJobs, DiscoverPage
from ui.models.model_details import READING_PENDING as READING_PENDING  # what the pane says, kept
from ui.models.model_details import READING_ROW as READING_ROW  # where the tests look for it
from ui.models.model_details import FileKey, InventoryReader, ModelDetails, Reading
from ui.models.model_import import attempt, check_files, import_checked
from ui.tables import read_only_table
from ui.theme import error_style

COLUMNS = ("Name", "Size", "Kind", "Default", "Status")
NAME, SIZE, KIND, DEFAULT, STATUS = range(len(COLUMNS))
MODEL_PATH = Qt.ItemDataRole.UserRole
GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"
PROJECTOR_FILTER = "GGUF vision projectors (*.gguf);;All files (*)"
MY_MODELS_TAB, DISCOVER_TAB = 0, 1


class ModelManager(QDialog):
    """The model list with a details pane; emits what the main window must act on."""

    default_changed = Signal(str)  # path of the model that is now the default
    load_requested = Signal(str, object)  # model path, projector path or None
    prompt_format_changed = Signal(str, str)  # model path, its new prompt-format setting
    import_done = Signal()  # an import finished: the list is redrawn and the outcome shown

    def __init__(
        self,
        library: ModelLibrary,
        parent: QWidget | None = None,
        read_inventory: InventoryReader = read_inventory,
        discover: DiscoverJobs | None = None,
    ) -> None:
        """`read_inventory` is the engine's (cached) reader; a test wraps it to see its thread.
        `discover`: the Discover page's jobs, when they outlive the dialog (the desktop's, so
        downloads go on after it closes); without them the dialog makes its own, with no
        profile, and pauses their downloads when it closes."""
        super().__init__(parent)
        self.library = library
        self._read_inventory = read_inventory
        self.pane = ModelDetails(read_inventory)
        self.details, self.breakdown = self.pane.details, self.pane.breakdown
        self.prompt_format = self.pane.prompt_format
        self._inventory_read = self.pane.inventory_read  # a reading came back (GUI thread)
        self._owns_jobs = discover is None
        self.jobs = discover or DiscoverJobs(DiscoverModel(), parent=self)
        self.setWindowTitle("Models")
        self.resize(1120, 700)
        self.tabs = QTabWidget()
        self.table = read_only_table(COLUMNS, stretch_column=NAME)
        self.message = QLabel(wordWrap=True)
        self._loaded: tuple[Path | None, Path | None] = (None, None)  # model, projector
        self.import_button = QPushButton("Import GGUF…")
        self.pair_button = QPushButton("Pair vision projector…")
        self.unpair_button = QPushButton("Unpair")
        self.default_button = QPushButton("Set as default")
        self.load_button = QPushButton("Load now")
        self.remove_button = QPushButton("Remove")
        self.close_buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self._last_folder = Path.home()
        self.discover = DiscoverPage(self.jobs)
        self._lay_out()
        self._name_for_screen_readers()
        self._connect()
        self.drop_filter = GgufDropFilter(self)
        self.drop_filter.files_dropped.connect(self.import_files)
        self.refresh()

    # -- building ------------------------------------------------------------------------------

    def _lay_out(self) -> None:
        left = QWidget()
        left_column = QVBoxLayout(left)
        left_column.addWidget(self.table, stretch=1)
        left_column.addWidget(self.message)
        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(self.pane)
        splitter.setSizes([520, 380])
        buttons = QHBoxLayout()
        for button in self._action_buttons():
            buttons.addWidget(button)
        buttons.addStretch(1)
        mine = QWidget()
        mine_column = QVBoxLayout(mine)
        mine_column.addWidget(QLabel("Drop .gguf files here, or import them."))
        mine_column.addWidget(splitter, stretch=1)
        mine_column.addLayout(buttons)
        self.tabs.addTab(mine, "My models")
        self.tabs.addTab(self.discover, "Discover")
        closing = QHBoxLayout()
        closing.addStretch(1)
        closing.addWidget(self.close_buttons)
        column = QVBoxLayout(self)
        column.addWidget(self.tabs, stretch=1)
        column.addLayout(closing)

    def _action_buttons(self) -> tuple[QPushButton, ...]:
        return (
            self.import_button, self.pair_button, self.unpair_button,
            self.default_button, self.load_button, self.remove_button,
        )  # fmt: skip

    def _name_for_screen_readers(self) -> None:
        self.table.setAccessibleName("Models")
        self.message.setAccessibleName("Model manager message")
        self.close_buttons.setAccessibleName("Close the model manager")
        for button in self._action_buttons():
            button.setAccessibleName(button.text().rstrip("…"))

    def _connect(self) -> None:
        self.table.itemSelectionChanged.connect(self._show_selected)
        self.table.itemDoubleClicked.connect(lambda _item: self.request_load())
        self.import_button.clicked.connect(self.choose_and_import)
        self.pair_button.clicked.connect(self.choose_projector)
        self.unpair_button.clicked.connect(self.unpair)
        self.default_button.clicked.connect(self.set_default)
        self.load_button.clicked.connect(self.request_load)
        self.remove_button.clicked.connect(self.remove)
        self.prompt_format.activated.connect(lambda _index: self.set_prompt_format())
        self.close_buttons.rejected.connect(self.reject)
        self.discover.load_requested.connect(self._load_downloaded)
        self.jobs.imported.connect(self._downloaded)

    def show_discover(self) -> DiscoverPage:
        """Bring the Discover tab to the front (the no-model empty state points here)."""
        self.tabs.setCurrentIndex(DISCOVER_TAB)
        return self.discover

    def done(self, result: int) -> None:
        """Closing: the page stops following the Discover state; jobs of the dialog's own
        pause their downloads (they are listed with Resume next time)."""
        self.discover.detach()
        if self._owns_jobs:
            self.jobs.shutdown()
        super().done(result)

    def _downloaded(self, model_path: str) -> None:
        """A download finished and is in the model list: show it under My models."""
        self.refresh(select=Path(model_path).resolve())

    def _load_downloaded(self, model_path: str, projector: str | None) -> None:
        """ "Load now" on the Discover tab: the same request as from My models, then close."""
        self.load_requested.emit(model_path, projector)
        self.accept()

    # -- rendering -----------------------------------------------------------------------------

    def refresh(self, select: Path | None = None) -> None:
        """Redraw the list from the library, keeping (or moving) the selection."""
        current = self.selected()
        wanted = select or (current.path if current else None)
        entries = self.library.models()
        self.table.blockSignals(True)
        self.table.setRowCount(len(entries))
        for row, entry in enumerate(entries):
            for column, text in enumerate(_row_texts(entry)):
                item = QTableWidgetItem(text)
                item.setData(MODEL_PATH, str(entry.path))
                self.table.setItem(row, column, item)
        rows = [row for row, entry in enumerate(entries) if entry.path == wanted]
        self.table.selectRow(rows[0] if rows else 0)
        self.table.blockSignals(False)
        self._show_selected()

    def selected(self) -> ModelEntry | None:
        """The entry of the selected row, as the library has it now."""
        items = self.table.selectedItems()
        if not items:
            return None
        return self.library.find(items[0].data(MODEL_PATH))

    def _show_selected(self) -> None:
        entry = self.selected()
        self.pane.show_entry(entry)
        self._enable_buttons(entry)

    def _enable_buttons(self, entry: ModelEntry | None) -> None:
        stored = entry is not None and not entry.builtin
        present = entry is not None and entry.exists
        paired = entry is not None and entry.mmproj_path is not None
        is_default = entry is not None and entry.is_default
        self.pair_button.setEnabled(stored and present)
        self.unpair_button.setEnabled(stored and paired)
        self.default_button.setEnabled(present and not is_default)
        loaded = entry is not None and self._is_loaded(entry)
        self.load_button.setEnabled(present and not loaded)
        self.load_button.setToolTip("this model is loaded now" if loaded else "")
        self.prompt_format.setEnabled(stored)  # the built-in model keeps its own template
        self.remove_button.setEnabled(stored)

    def set_loaded(self, model_path: str | None, projector_path: str | None = None) -> None:
        """The model the window has loaded (None: none): "Load now" is off for it, as loading
        it again would only reload the same file. The same model with another projector
        paired since still loads (it gains or changes its vision)."""
        self._loaded = (_resolved(model_path), _resolved(projector_path))
        self._enable_buttons(self.selected())

    def _is_loaded(self, entry: ModelEntry) -> bool:
        projector = entry.mmproj_path if entry.mmproj_exists else None
        return self._loaded == (_resolved(entry.path), _resolved(projector))

    def show_message(self, text: str, problem: bool = False) -> None:
        """One line (or one per file) under the list; problems in red."""
        self.message.setStyleSheet(error_style(self.message) if problem else "")
        self.message.setText(text)

    # -- actions -------------------------------------------------------------------------------

    def choose_and_import(self) -> None:
        """The "Import GGUF…" button: pick files, then import them as if dropped."""
        names, _filter = QFileDialog.getOpenFileNames(
            self, "Import GGUF models", str(self._last_folder), GGUF_FILTER
        )
        if names:
            self.import_files([Path(name) for name in names])

    def import_files(self, paths: list[Path]) -> None:
        """Add dropped or chosen files; projectors dropped with a single model are paired to it.

        The files are read on the worker first; `import_done` says when the list
        shows the outcome. Each refused file gets its one-line reason; the others
        are imported anyway.
        """
        if not paths:
            return
        self._last_folder = paths[0].parent
        self.show_message(f"Checking {_files_text(len(paths))}…")
        paths = list(paths)
        self.pane.reader.run(
            lambda: check_files(paths, self._read_inventory),
            lambda readings: self._import_checked(paths, readings),
        )

    def _import_checked(self, paths: list[Path], readings: Mapping[FileKey, Reading]) -> None:
        """Once the files were read: list them, then say how it went."""
        self.pane.keep(readings)
        outcome = import_checked(self.library, paths)
        self.refresh(select=outcome.added[-1].path if outcome.added else None)
        self.show_message(outcome.message(), problem=bool(outcome.problems))
        self.import_done.emit()

    def choose_projector(self) -> None:
        """The "Pair vision projector…" button, for the selected model."""
        entry = self.selected()
        if entry is None:
            return
        name, _filter = QFileDialog.getOpenFileName(
            self, f"Vision projector for {entry.name}", str(entry.path.parent), PROJECTOR_FILTER
        )
        if name:
            self.pair_projector(entry, Path(name))

    def pair_projector(self, entry: ModelEntry, projector: Path) -> None:
        problems: list[str] = []
        paired = attempt(lambda: self.library.pair_projector(entry.path, projector), problems)
        self.refresh()
        if paired is None:
            self.show_message(problems[0], problem=True)
        else:
            self.show_message(f"Paired {projector.name} with {entry.name}")

    def unpair(self) -> None:
        entry = self.selected()
        if entry is None or entry.mmproj_path is None:
            return
        self._act(lambda: self.library.unpair_projector(entry.path), f"Unpaired {entry.name}")

    def set_default(self) -> None:
        entry = self.selected()
        if entry is None:
            return
        if self._act(lambda: self.library.set_default(entry.path), f"{entry.name} is the default"):
            self.default_changed.emit(str(entry.path))

    def set_prompt_format(self) -> None:
        """The prompt-format choice: stored for the selected model, and applied to it now
        if it is the loaded one (the main window decides)."""
        entry, name = self.selected(), self.prompt_format.currentText()
        if entry is None or name == entry.prompt_format:
            return
        change = partial(self.library.set_prompt_format, entry.path, name)
        if self._act(change, f"{entry.name} writes its prompts as {name!r} from now on"):
            self.prompt_format_changed.emit(str(entry.path), name)

    def request_load(self) -> None:
        """Ask the main window to load the selected model (and its projector), then close."""
        entry = self.selected()
        if entry is None or not entry.exists:
            return
        projector = str(entry.mmproj_path) if entry.mmproj_exists else None
        self.load_requested.emit(str(entry.path), projector)
        self.accept()

    def remove(self) -> None:
        """Confirm, then take the selected model off the list (deleting its file if ticked)."""
        entry = self.selected()
        if entry is None or entry.builtin:
            return
        delete_file = self.confirm_removal(entry)
        if delete_file is None:
            return
        problems: list[str] = []
        removed = attempt(lambda: self.library.remove(entry.path, delete_file), problems)
        self.refresh()
        if removed is None:
            self.show_message(problems[0], problem=True)
            return
        deleted = " and deleted its file" if removed.file_deleted else " (the file stays on disk)"
        self.show_message(f"Removed {entry.name}{deleted}")
        if removed.default_reset:
            self.default_changed.emit(str(self.library.default().path))

    def confirm_removal(self, entry: ModelEntry) -> bool | None:
        """Ask before removing: None to cancel, else whether to delete the file too."""
        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Remove model",
            f"Remove {entry.name} from the list?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            self,
        )
        box.setInformativeText(f"{entry.path}\nThe file stays on disk unless you tick the box.")
        delete_box = QCheckBox("Also delete the file from disk")
        delete_box.setAccessibleName("Also delete the file from disk")
        delete_box.setEnabled(entry.exists)
        box.setCheckBox(delete_box)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        if box.exec() != QMessageBox.StandardButton.Yes:
            return None
        return delete_box.isChecked()

    def _act(self, change: Callable[[], ModelEntry], done: str) -> bool:
        """Run a library change, redraw, and say how it went; False when it was refused."""
        problems: list[str] = []
        result = attempt(change, problems)
        self.refresh()
        self.show_message(problems[0] if problems else done, problem=bool(problems))
        return result is not None


# -- plain helpers -----------------------------------------------------------------------------


def _resolved(path: str | Path | None) -> Path | None:
    return Path(path).resolve() if path else None


def _row_texts(entry: ModelEntry) -> tuple[str, ...]:
    name = f"{entry.readable_name} (built-in)" if entry.builtin else entry.readable_name
    size = format_bytes(entry.file_bytes) if entry.file_bytes is not None else "—"
    default = "default" if entry.is_default else ""
    return name, size, entry.kind_text, default, _status(entry)


def _status(entry: ModelEntry) -> str:
    if not entry.exists:
        return "missing"
    if entry.mmproj_path is not None and not entry.mmproj_exists:
        return "projector missing"
    return ""


def _files_text(count: int) -> str:
    return "1 file" if count == 1 else f"{count} files"
