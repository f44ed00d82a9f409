"""The "Models" dialog: import, pair, choose the default, load and remove GGUF models
("My models"), and get new ones from Hugging Face ("Discover", ui.discover_page).

"My models" renders `app.model_library.ModelLibrary` (the list) and
`app.model_summary` (what is said about one file); every change goes through
the library and the dialog then redraws from it, so the window never holds
state of its own. Refusals (a text file named .gguf, a projector given as a
model) are shown as their one-line reason under the list and change nothing.

Threads: reading a model's inventory takes about 2 s for a 49k-token vocabulary
(more for 256k), so it never runs on the GUI thread. The details pane says
"reading the model…" while a worker reads, and the result comes back through a
queued signal; a result for an entry no longer shown is kept in the cache but
not drawn. Readings are cached per file version (path, size, modification
time), so selecting a model again redraws at once. An import reads each file on
the same worker first and only then lets the library check and list it on the
GUI thread, where the library's read finds the file in
`engine.model.inventory.read_inventory`'s cache (16 files; a bigger drop reads
the oldest again); its readings join the cache, so the imported model's details
show at once. The library itself stays on the GUI thread: its SQLite
connection belongs to the thread that opened it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.hub.discover_model import DiscoverModel
from app.model_library import (
    ModelEntry,
    ModelLibrary,
    check_loadable,
    is_projector_name,
    lone_projector_beside,
)
from app.model_summary import ModelSummary, summarize
from app.prompt_format_setting import chosen_format_text, prompt_format_choices
from app.units import format_bytes
from engine.errors import BadInputError
from engine.model.inventory import ModelInventory, read_inventory
from ui.discover_page import DiscoverJobs, DiscoverPage
from ui.model_drop import GgufDropFilter
from ui.tables import read_only_table
from ui.theme import error_style

COLUMNS = ("Name", "Size", "Kind", "Default", "Status")
NAME, SIZE, KIND, DEFAULT, STATUS = range(len(COLUMNS))
MODEL_PATH = Qt.ItemDataRole.UserRole
GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"
PROJECTOR_FILTER = "GGUF vision projectors (*.gguf);;All files (*)"
FORMAT_ROW, FORMAT_PENDING = "Prompt format", "reading the vocabulary…"
READING_ROW, READING_PENDING = "Status", "reading the model…"

T = TypeVar("T")
InventoryReader = Callable[[Path], ModelInventory]
MY_MODELS_TAB, DISCOVER_TAB = 0, 1
FileKey = tuple[Path, int, int]  # path, size, mtime (ns): one version of one file
Reading = ModelSummary | str  # what the file holds, or why it cannot be read

log = logging.getLogger(__name__)


class ModelManager(QDialog):
    """The model list with a details pane; emits what the main window must act on."""

    default_changed = Signal(str)  # path of the model that is now the default
    load_requested = Signal(str, object)  # model path, projector path or None
    prompt_format_changed = Signal(str, str)  # model path, its new prompt-format setting
    import_done = Signal()  # an import finished: the list is redrawn and the outcome shown
    _format_described = Signal(object, str)  # the entry described, what its prompts are written in
    _inventory_read = Signal(object, object, object)  # entry, its FileKey, its Reading
    _files_checked = Signal(object, object)  # the paths to import, {FileKey: Reading} of them

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
        self._owns_jobs = discover is None
        self.jobs = discover or DiscoverJobs(DiscoverModel(), parent=self)
        self.setWindowTitle("Models")
        self.resize(1120, 700)
        self.tabs = QTabWidget()
        self.table = read_only_table(COLUMNS, stretch_column=NAME)
        self.details = read_only_table(("Property", "Value"), stretch_column=1)
        self.breakdown = read_only_table(("Part", "Size", "Share"), stretch_column=0)
        self.message = QLabel(wordWrap=True)
        self.prompt_format = QComboBox()
        self.prompt_format.addItems(prompt_format_choices())
        # a model's prompt format takes a vocabulary read (0.1 s for 49k tokens, more for
        # 256k-token vocabularies): off the GUI thread, its row filled in when known
        self._describer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prompt-format")
        self._format_described.connect(self._show_format)
        # inventories (details, import checks) on one worker, in the order asked
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model-reader")
        queued = Qt.ConnectionType.QueuedConnection
        self._inventory_read.connect(self._show_reading, queued)
        self._files_checked.connect(self._import_checked, queued)
        self._readings: dict[FileKey, Reading] = {}  # touched on the GUI thread only
        self._shown: ModelEntry | None = None  # the entry the details pane describes
        self._wanted: FileKey | None = None  # the file version it waits for (read by the worker)
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
        right = QWidget()
        right_column = QVBoxLayout(right)
        format_row = QHBoxLayout()
        format_row.addWidget(QLabel("Prompt format"))
        format_row.addWidget(self.prompt_format, stretch=1)
        right_column.addLayout(format_row)
        right_column.addWidget(QLabel("Details"))
        right_column.addWidget(self.details, stretch=3)
        right_column.addWidget(QLabel("Size by part"))
        right_column.addWidget(self.breakdown, stretch=2)
        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(right)
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
        self.details.setAccessibleName("Model details")
        self.breakdown.setAccessibleName("Model size by part")
        self.message.setAccessibleName("Model manager message")
        self.prompt_format.setAccessibleName("Prompt format of the selected model")
        self.prompt_format.view().setAccessibleName("Prompt formats")
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
        self._show_details(entry)
        self._enable_buttons(entry)
        self.prompt_format.blockSignals(True)
        self.prompt_format.setCurrentText(entry.prompt_format if entry else "auto")
        self.prompt_format.blockSignals(False)

    def _show_details(self, entry: ModelEntry | None) -> None:
        """Draw what is known of the entry now; a file not read yet is read on the worker."""
        self._shown = entry
        key = _file_key(entry.path) if entry is not None and entry.exists else None
        self._wanted = key
        if entry is None or key is None:
            self._draw_details(entry, None)
            return
        reading = self._readings.get(key)
        if reading is None:
            self._draw_details(entry, None)
            self._reader.submit(self._read, entry, key)
        else:
            self._draw_details(entry, reading)

    def _draw_details(self, entry: ModelEntry | None, reading: Reading | None) -> None:
        """Facts and breakdown of the entry; `reading` None while its file is being read."""
        facts: list[tuple[str, str]] = []
        parts: list[tuple[str, str, str]] = []
        if entry is not None:
            facts = [("File", str(entry.path))]
            if entry.mmproj_path is not None:
                facts.append(("Vision projector", _projector_text(entry)))
            if self._wanted is None:  # no version of the file to read: it is gone
                facts.append(("Status", "the file is missing"))
            elif reading is None:
                facts.insert(0, (READING_ROW, READING_PENDING))
            elif isinstance(reading, str):
                facts.append(("Problem", reading))
            else:
                facts = reading.facts() + [(FORMAT_ROW, FORMAT_PENDING)] + facts
                self._describer.submit(self._describe_format, entry)
                parts = [(s.label, s.size_text, s.percent_text) for s in reading.breakdown]
        _fill(self.details, facts)
        _fill(self.breakdown, parts)

    def _read(self, entry: ModelEntry, key: FileKey) -> None:
        """On the reader's thread: the entry's summary, or why not, to the GUI thread.

        A read asked for an entry the user has already moved past is skipped, so
        scrolling through the list does not queue a read per model passed.
        """
        if self._wanted != key:
            return
        reading: Reading
        try:
            reading = summarize(self._read_inventory(entry.path))
        except BadInputError as exc:
            reading = str(exc)
        except Exception as exc:  # the pane must not wait forever on a reader's bug
            log.exception("reading %s failed", entry.path)
            reading = f"{entry.path.name}: cannot be read ({type(exc).__name__}: {exc})"
        with contextlib.suppress(RuntimeError):  # the dialog went away meanwhile
            self._inventory_read.emit(entry, key, reading)

    def _show_reading(self, entry: ModelEntry, key: FileKey, reading: Reading) -> None:
        """On the GUI thread: keep the reading, and draw it if that entry is still shown."""
        self._readings[key] = reading
        if self._shown == entry and self._wanted == key:
            self._draw_details(entry, reading)

    def _describe_format(self, entry: ModelEntry) -> None:
        """On the describer's thread: what the entry's prompts are written in, to the GUI."""
        text = chosen_format_text(entry)
        with contextlib.suppress(RuntimeError):  # the dialog went away meanwhile
            self._format_described.emit(entry, text)

    def _show_format(self, entry: ModelEntry, text: str) -> None:
        """Fill the prompt-format row if the entry (with that setting) is still shown."""
        if self._shown != entry:
            return
        for row in range(self.details.rowCount()):
            label = self.details.item(row, 0)
            if label is not None and label.text() == FORMAT_ROW:
                self.details.setItem(row, 1, QTableWidgetItem(text))

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
        self._reader.submit(self._check_files, list(paths))

    def _check_files(self, paths: list[Path]) -> None:
        """On the reader's thread: read each file (and a lone projector beside a model) once,
        so the library's own check on the GUI thread finds it in the inventory cache; the
        readings go back too, so the details of what was imported show at once."""
        readings: dict[FileKey, Reading] = {}
        for path in paths:
            resolved = path.expanduser().resolve()
            key = _file_key(resolved)
            try:
                reading: Reading = summarize(self._read_inventory(resolved))
                if not is_projector_name(resolved):
                    check_loadable(resolved)  # llama.cpp's own reading, in a child process
                    lone_projector_beside(resolved)
            except BadInputError:
                continue  # the library refuses it again on the GUI thread, with the reason
            except Exception:  # likewise: the import must still finish
                log.exception("checking %s failed", path)
                continue
            if key is not None:
                readings[key] = reading
        with contextlib.suppress(RuntimeError):  # the dialog went away meanwhile
            self._files_checked.emit(paths, readings)

    def _import_checked(self, paths: list[Path], readings: dict[FileKey, Reading]) -> None:
        """On the GUI thread, once the files were read: list them, then say how it went."""
        self._readings.update(readings)
        projectors = [p for p in paths if is_projector_name(p)]
        models = [p for p in paths if p not in projectors]
        lines: list[str] = []
        problems: list[str] = []
        added = [entry for path in models if (entry := self._import_one(path, lines, problems))]
        if len(added) == 1 and len(projectors) == 1:
            self._pair_dropped(added[0], projectors[0], lines, problems)
        else:
            for path in projectors:  # refused by the library, with the reason
                self._attempt(partial(self.library.add, path), problems)
        self.refresh(select=added[-1].path if added else None)
        self.show_message("\n".join(problems + lines), problem=bool(problems))
        self.import_done.emit()

    def _import_one(self, path: Path, lines: list[str], problems: list[str]) -> ModelEntry | None:
        """Add one model file, noting what happened in `lines` or why not in `problems`."""
        known = self.library.find(path)
        entry = self._attempt(partial(self.library.add, path), problems)
        if entry is not None:
            note = "is already in the list" if known is not None else "imported"
            lines.append(f"{entry.name} {note}{_paired_note(entry) if known is None else ''}")
        return entry

    def _pair_dropped(
        self, model: ModelEntry, projector: Path, lines: list[str], problems: list[str]
    ) -> None:
        """Pair a projector dropped together with one model (unless import already did)."""
        if model.mmproj_path == projector.resolve():
            return
        pair = partial(self.library.pair_projector, model.path, projector)
        if self._attempt(pair, problems) is not None:
            lines.append(f"Paired {projector.name} with {model.name}")

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
        paired = self._attempt(lambda: self.library.pair_projector(entry.path, projector), problems)
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
        removed = self._attempt(lambda: self.library.remove(entry.path, delete_file), problems)
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
        result = self._attempt(change, problems)
        self.refresh()
        self.show_message(problems[0] if problems else done, problem=bool(problems))
        return result is not None

    @staticmethod
    def _attempt(change: Callable[[], T], problems: list[str]) -> T | None:
        try:
            return change()
        except BadInputError as exc:
            problems.append(str(exc))
            return None


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


def _file_key(path: Path) -> FileKey | None:
    """This version of the file (None if it cannot be looked at): what a reading is kept by."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return path, stat.st_size, stat.st_mtime_ns


def _files_text(count: int) -> str:
    return "1 file" if count == 1 else f"{count} files"


def _projector_text(entry: ModelEntry) -> str:
    text = str(entry.mmproj_path)
    return text if entry.mmproj_exists else f"{text} (missing)"


def _paired_note(entry: ModelEntry) -> str:
    if entry.mmproj_path is None:
        return ""
    return f", paired with {entry.mmproj_path.name}"


def _fill(table: QTableWidget, rows: Sequence[tuple[str, ...]]) -> None:
    table.setRowCount(len(rows))
    for row, texts in enumerate(rows):
        for column, text in enumerate(texts):
            table.setItem(row, column, QTableWidgetItem(text))
