"""What the Discover page's tables and lines show: cells, tips, colours, one-line facts.

Plain drawing, kept apart from the page's layout and actions (ui.models.discover_page):
each `fill_*` function redraws one table from the `DiscoverModel`'s rows
(app.hub.discover_model) with its signals blocked, so a redraw never reads as a
click; every item keeps what its row stands for under `ROW_KEY`.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QLabel, QTableWidget, QTableWidgetItem, QWidget

from app.hub.catalogue import RepoSummary
from app.hub.discover_downloads import DownloadState
from app.hub.discover_model import (
    QUANT_COLUMNS,
    DiscoverModel,
    QuantRow,
    result_cells,
)
from app.hub.gguf_files import RemoteModel
from app.screen_text.units import format_bytes
from ui.tables import read_only_table
from ui.theme import DARK, LIGHT, Theme, error_style

ROW_KEY = Qt.ItemDataRole.UserRole  # what a row stands for: repository, quant path, download id
RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
QUANT, SIZE, SPEED, FIRST_TOKEN, IN_VRAM, NOTES = range(len(QUANT_COLUMNS))
DOWNLOAD_COLUMNS = ("Download", "Progress")


def discover_table(headers: tuple[str, ...], stretch_column: int) -> QTableWidget:
    """The manager's read-only table, drawn without grid lines or wrapped cells."""
    table = read_only_table(headers, stretch_column)
    table.setShowGrid(False)
    table.setWordWrap(False)
    return table


def fill_results(table: QTableWidget, results: list[RepoSummary]) -> None:
    """One row per repository found: name, kind, figures right-aligned, licence in the tip."""
    table.blockSignals(True)
    table.setRowCount(len(results))
    for row, result in enumerate(results):
        for column, text in enumerate(result_cells(result)):
            item = QTableWidgetItem(text)
            item.setData(ROW_KEY, result.repo_id)
            if column > 1:
                item.setTextAlignment(RIGHT)
            item.setToolTip(_result_tip(result.repo_id, result.license))
            table.setItem(row, column, item)
    table.blockSignals(False)


def fill_quants(table: QTableWidget, rows: list[QuantRow], selected_path: str | None) -> None:
    """One row per quant with its prediction; the recommended one bold, the selected one
    selected."""
    table.blockSignals(True)
    table.setRowCount(len(rows))
    for index, row in enumerate(rows):
        _draw_quant(table, index, row)
    chosen = [i for i, row in enumerate(rows) if row.model.path == selected_path]
    if chosen:
        table.selectRow(chosen[0])
    else:
        table.clearSelection()
    table.blockSignals(False)


def fill_downloads(
    table: QTableWidget, states: list[DownloadState], chosen: DownloadState | None
) -> None:
    """One row per download with its progress (a failure that can be resumed in red); the
    selection stays on the download chosen before, else the first."""
    table.blockSignals(True)
    table.setRowCount(len(states))
    for index, state in enumerate(states):
        failed = bool(state.error) and state.can_resume
        progress = state.progress_text()
        if failed:
            progress = f"{progress}: {state.error}"
        for column, text in enumerate((state.name, progress)):
            item = QTableWidgetItem(text)
            item.setData(ROW_KEY, state.download_id)
            item.setToolTip(text)
            if column == 1 and failed:
                item.setForeground(danger(table))
            table.setItem(index, column, item)
    keep = [i for i, s in enumerate(states) if chosen and s.download_id == chosen.download_id]
    if keep or states:
        table.selectRow(keep[0] if keep else 0)
    table.blockSignals(False)


def _draw_quant(table: QTableWidget, index: int, row: QuantRow) -> None:
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
            item.setForeground(danger(table))
        table.setItem(index, column, item)


def meta_text(model: DiscoverModel) -> str:
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


def download_text(model: RemoteModel | None) -> str:
    if model is None:
        return "Download"
    return f"Download {model.quant or 'file'} · {format_bytes(model.download_size)}"


def _counted(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _result_tip(repo_id: str, licence: str | None) -> str:
    return f"{repo_id}\nlicence: {licence or 'not given'}"


def say(label: QLabel, text: str, problem: str) -> None:
    """One line under a part of the page: a problem in the theme's red, else muted words."""
    label.setStyleSheet(error_style(label) if problem else muted_style(label))
    label.setText(problem or text)
    label.setVisible(bool(problem or text))


def muted_style(widget: QWidget) -> str:
    """Secondary words in the theme's muted colour (picked as ui.theme.error_style picks
    its red: a label's own palette follows the last style sheet it was given)."""
    return f"color: {_theme_on(widget).muted_text};"


def danger(widget: QWidget) -> QColor:
    return QColor(_theme_on(widget).danger)


def _theme_on(widget: QWidget) -> Theme:
    """The theme whose colours read on the widget's background, light or dark."""
    return DARK if widget.palette().color(QPalette.ColorRole.Window).lightness() < 128 else LIGHT
