"""The wizard's "Suggested for this machine": one or two Hub models that fit the measured budget.

Looking takes a search, a listing and a header read per candidate (a few seconds
online), so it runs on a worker and the answer comes back on the GUI thread (ui.thread_bridge);
the wizard's pages stay usable meanwhile. Each suggestion says its
predicted speed here and its download size, and its button asks for the
download in Discover (`download_requested`); the window starts it there, where
it can be paused, resumed and loaded like any other. Offline, the box says so
and suggests nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import PurePosixPath

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.hub.hub_errors import HubOfflineError
from app.hub.model_suggestions import ModelSuggestion, suggest_models
from app.screen_text.units import format_bytes, speed_range_text
from engine.errors import ShardChatError
from engine.machine.profile import Profile
from ui.thread_bridge import Background

log = logging.getLogger(__name__)

LOOKING = "Looking on Hugging Face for models that fit this machine…"
OFFLINE = (
    "Offline: {reason}. No suggestions now; Tools → Discover models finds models when the "
    "connection is back."
)
NONE_FIT = (
    "None of the most downloaded models on Hugging Face is predicted to run well here; the "
    "embedded model works, and Discover lists more."
)
Suggest = Callable[[Profile, int], list[ModelSuggestion]]


class SuggestionsBox(QWidget):
    download_requested = Signal(str, str)  # repository, the quant's path in it

    def __init__(self, suggest: Suggest = suggest_models, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._suggest = suggest
        self._worker = Background("suggestions", owner=self)
        self.suggestions: list[ModelSuggestion] = []
        self.title = QLabel("<b>Suggested for this machine</b>")
        self.status = QLabel(wordWrap=True)
        self.status.setAccessibleName("Model suggestions")
        self.rows: list[tuple[QLabel, QPushButton]] = []
        self._rows = QVBoxLayout()
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.title)
        column.addWidget(self.status)
        column.addLayout(self._rows)
        self.hide()

    def look_for(self, profile: Profile, budget_bytes: int) -> None:
        """Find suggestions for this profile and budget, on the worker."""
        self.show()
        self.status.setText(LOOKING)
        self._worker.run(lambda: self._look(profile, budget_bytes), self._show)

    def shutdown(self) -> None:
        self._worker.shutdown()

    def _look(self, profile: Profile, budget_bytes: int) -> list[ModelSuggestion] | str:
        """On the worker: the suggestions, or the line that says why there are none."""
        try:
            return self._suggest(profile, budget_bytes)
        except HubOfflineError as exc:
            return OFFLINE.format(reason=exc)
        except ShardChatError as exc:
            return f"No suggestions: {exc}"
        except Exception as exc:  # the page must say something, never wait forever
            log.exception("model suggestions failed")
            return f"No suggestions: {type(exc).__name__}: {exc}"

    def _show(self, answer: list[ModelSuggestion] | str) -> None:
        if isinstance(answer, str):
            self.status.setText(answer)
            return
        self.suggestions = answer
        self.status.setText(
            "Predicted for this machine at its suggested VRAM budget. Download takes one to "
            "Discover after Finish, where it can be paused and loaded."
            if answer
            else NONE_FIT
        )
        for suggestion in answer:
            self._add_row(suggestion)

    def _add_row(self, suggestion: ModelSuggestion) -> None:
        text = QLabel(suggestion_text(suggestion), wordWrap=True)
        button = QPushButton("Download")
        name = PurePosixPath(suggestion.model.path).name
        button.setAccessibleName(f"Download {name}")
        button.clicked.connect(lambda: self._request(suggestion, button))
        row = QHBoxLayout()
        row.addWidget(text, stretch=1)
        row.addWidget(button)
        self._rows.addLayout(row)
        self.rows.append((text, button))

    def _request(self, suggestion: ModelSuggestion, button: QPushButton) -> None:
        for _text, other in self.rows:
            other.setText("Download")
        button.setText("Downloads after Finish")
        self.download_requested.emit(suggestion.repo_id, suggestion.model.path)


def suggestion_text(suggestion: ModelSuggestion) -> str:
    """'owner/Repo · Q4_K_M: 11-14 tok/s here, 2.5 GiB download' (the range: how sure)."""
    prediction = suggestion.prediction
    quant = suggestion.model.quant or PurePosixPath(suggestion.model.path).name
    return (
        f"{suggestion.repo_id} · {quant}: "
        f"{speed_range_text(prediction.decode_tokens_per_s, prediction.sureness)} "
        f"here, {format_bytes(suggestion.download_bytes)} download"
    )
