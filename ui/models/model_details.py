"""The Models dialog's details pane: what one GGUF file holds, read off the GUI thread.

Reading a model's inventory takes about 2 s for a 49k-token vocabulary (more
for 256k), so it never runs on the GUI thread. The pane says "reading the
model…" while the reader works, and the answer comes back through
ui.thread_bridge; an answer for an entry no longer shown is kept in the cache
but not drawn, and a read asked for an entry the user has already moved past is
skipped, so scrolling through the list does not queue a read per model passed.
Readings are cached per file version (path, size, modification time), so
selecting a model again redraws at once. The reader is shared with the import
(ui.models.model_import): both read inventories on one worker, in the order asked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.screen_text.model_summary import ModelSummary, summarize
from app.screen_text.prompt_format_setting import chosen_format_text, prompt_format_choices
from app.stores.model_library import ModelEntry
from engine.errors import BadInputError
from engine.model.inventory import ModelInventory
from ui.tables import read_only_table
from ui.thread_bridge import Background

FORMAT_ROW, FORMAT_PENDING = "Prompt format", "reading the vocabulary…"
READING_ROW, READING_PENDING = "Status", "reading the model…"

InventoryReader = Callable[[Path], ModelInventory]
FileKey = tuple[Path, int, int]  # path, size, mtime (ns): one version of one file
Reading = ModelSummary | str  # what the file holds, or why it cannot be read

log = logging.getLogger(__name__)


class ModelDetails(QWidget):
    """The prompt-format choice, the facts and the size by part of the selected entry."""

    inventory_read = Signal(object, object, object)  # entry, its FileKey, its Reading (GUI)

    def __init__(self, read_inventory: InventoryReader) -> None:
        super().__init__()
        self._read_inventory = read_inventory
        self.details = read_only_table(("Property", "Value"), stretch_column=1)
        self.breakdown = read_only_table(("Part", "Size", "Share"), stretch_column=0)
        self.prompt_format = QComboBox()
        self.prompt_format.addItems(prompt_format_choices())
        self.reader = Background("model-reader", owner=self)  # inventories, in the order asked
        # a model's prompt format takes a vocabulary read (0.1 s for 49k tokens, more for
        # 256k-token vocabularies): off the GUI thread, its row filled in when known
        self._describer = Background("prompt-format", owner=self)
        self._readings: dict[FileKey, Reading] = {}  # touched on the GUI thread only
        self._shown: ModelEntry | None = None  # the entry the pane describes
        self._wanted: FileKey | None = None  # the file version it waits for (read by the worker)
        self._lay_out()

    def _lay_out(self) -> None:
        column = QVBoxLayout(self)
        format_row = QHBoxLayout()
        format_row.addWidget(QLabel("Prompt format"))
        format_row.addWidget(self.prompt_format, stretch=1)
        column.addLayout(format_row)
        column.addWidget(QLabel("Details"))
        column.addWidget(self.details, stretch=3)
        column.addWidget(QLabel("Size by part"))
        column.addWidget(self.breakdown, stretch=2)
        self.details.setAccessibleName("Model details")
        self.breakdown.setAccessibleName("Model size by part")
        self.prompt_format.setAccessibleName("Prompt format of the selected model")
        self.prompt_format.view().setAccessibleName("Prompt formats")

    def keep(self, readings: Mapping[FileKey, Reading]) -> None:
        """Readings made elsewhere (an import's checks): shown at once when selected."""
        self._readings.update(readings)

    def show_entry(self, entry: ModelEntry | None) -> None:
        """Draw what is known of the entry now; a file not read yet is read on the worker."""
        self._shown = entry
        key = file_key(entry.path) if entry is not None and entry.exists else None
        self._wanted = key
        self.prompt_format.blockSignals(True)
        self.prompt_format.setCurrentText(entry.prompt_format if entry else "auto")
        self.prompt_format.blockSignals(False)
        if entry is None or key is None:
            self._draw(entry, None)
            return
        reading = self._readings.get(key)
        self._draw(entry, reading)
        if reading is None:
            self.reader.run(
                lambda: self._read(entry, key), lambda read: self._show_reading(entry, key, read)
            )

    def _draw(self, entry: ModelEntry | None, reading: Reading | None) -> None:
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
                self._describer.run(
                    lambda: chosen_format_text(entry), lambda text: self._show_format(entry, text)
                )
                parts = [(s.label, s.size_text, s.percent_text) for s in reading.breakdown]
        fill(self.details, facts)
        fill(self.breakdown, parts)

    def _read(self, entry: ModelEntry, key: FileKey) -> Reading | None:
        """On the reader's thread: the entry's summary, or why not; None when it is no longer
        the one wanted."""
        if self._wanted != key:
            return None
        try:
            return summarize(self._read_inventory(entry.path))
        except BadInputError as exc:
            return str(exc)
        except Exception as exc:  # the pane must not wait forever on a reader's bug
            log.exception("reading %s failed", entry.path)
            return f"{entry.path.name}: cannot be read ({type(exc).__name__}: {exc})"

    def _show_reading(self, entry: ModelEntry, key: FileKey, reading: Reading | None) -> None:
        """Keep the reading, and draw it if that entry is still shown."""
        if reading is None:
            return
        self._readings[key] = reading
        if self._shown == entry and self._wanted == key:
            self._draw(entry, reading)
        self.inventory_read.emit(entry, key, reading)

    def _show_format(self, entry: ModelEntry, text: str) -> None:
        """Fill the prompt-format row if the entry (with that setting) is still shown."""
        if self._shown != entry:
            return
        for row in range(self.details.rowCount()):
            label = self.details.item(row, 0)
            if label is not None and label.text() == FORMAT_ROW:
                self.details.setItem(row, 1, QTableWidgetItem(text))


def file_key(path: Path) -> FileKey | None:
    """This version of the file (None if it cannot be looked at): what a reading is kept by."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return path, stat.st_size, stat.st_mtime_ns


def fill(table: QTableWidget, rows: Sequence[tuple[str, ...]]) -> None:
    table.setRowCount(len(rows))
    for row, texts in enumerate(rows):
        for column, text in enumerate(texts):
            table.setItem(row, column, QTableWidgetItem(text))


def _projector_text(entry: ModelEntry) -> str:
    text = str(entry.mmproj_path)
    return text if entry.mmproj_exists else f"{text} (missing)"
