"""What the VRAM panel's "Other computers" box does: list, add and remove lent computers.

Adding one probes it, measures its link and its device's speed (seconds, a child
process among them) and keeps it, exactly as `shardchat devices add` does
(app.lent.computers); reading the list opens the profile database. Both run on a
worker thread and report back through a relay, so the GUI thread never waits on the
network or on SQLite. An address that does not lead to a usable computer is one line
under the list, in the check's own words.
"""

from __future__ import annotations

import logging
from functools import partial

from PySide6.QtCore import QObject, Signal

from app.lent.computers import add_lent_computer, kept_machines, remove_lent_computer
from app.lent.split import LentSplit, split_for_model
from app.screen_text.lent_computers_view import (
    LentComputersView,
    checking,
    failed,
    listed,
    running_across,
    with_split,
)
from app.screen_text.units import parse_size
from app.stores.remote_machines import RemoteMachine
from engine.errors import ShardChatError
from ui.lent.lent_computers_box import ComputerToAdd, LentComputersBox
from ui.thread_bridge import Background

log = logging.getLogger(__name__)


class LentComputersController(QObject):
    across_changed = Signal(bool)  # "Run models across these computers" was switched

    def __init__(self, box: LentComputersBox) -> None:
        super().__init__(box)
        self.box = box
        self.view = LentComputersView()
        self._background = Background("shardchat-lent-computers", owner=self)
        self._model: tuple[str, str, int] | None = None  # the loaded model: path, name, n_ctx
        box.add_requested.connect(self.add)
        box.remove_requested.connect(self.remove)
        box.across_toggled.connect(self.run_across)
        self.refresh()

    def refresh(self) -> None:
        self._background.run(kept_machines, self._listed, self._failed)

    def add(self, wanted: ComputerToAdd) -> None:
        try:
            budget = parse_size(wanted.budget) if wanted.budget else None
        except ValueError as exc:
            self._show(failed(self.view, f"Budget: {exc}"))
            return
        options = [f"IdentityFile={wanted.identity_file}"] if wanted.identity_file else []
        self._show(checking(self.view, wanted.address))
        adding = partial(add_lent_computer, wanted.address, options, budget)
        self._background.run(adding, self._added, self._failed)

    def use_model(self, model_path: str, model_name: str, n_ctx: int, running: str = "") -> None:
        """The window loaded this model: the split it runs under (`running`, the engine's
        line), or, when it runs here alone, what `chat --lent` would run for it."""
        self._model = (model_path, model_name, n_ctx)
        if running:
            self._show(with_split(self.view, model_name, running, running=True))
        else:
            self._plan_split()

    def run_across(self, on: bool) -> None:
        """Split the models this window loads across the lent computers, or stop."""
        if on != self.view.across:
            self._show(running_across(self.view, on))
            self.across_changed.emit(on)

    def remove(self, address: str) -> None:
        self._background.run(partial(remove_lent_computer, address), self._added, self._failed)

    def shutdown(self) -> None:
        self._background.shutdown()

    def _added(self, _done: object) -> None:
        self.refresh()

    def _listed(self, machines: list[RemoteMachine]) -> None:
        self._show(listed(machines, self.view))
        self._plan_split()  # the computers changed, and so may the split

    def _plan_split(self) -> None:
        """Planned off the GUI thread: it reads the model's header and the profile store."""
        if self._model is None:
            return
        path, name, n_ctx = self._model

        def said(lent: LentSplit | None) -> None:
            self._show(with_split(self.view, name, lent.said if lent is not None else ""))

        def refused(error: BaseException) -> None:
            if not isinstance(error, ShardChatError):
                log.error("the split of %s could not be planned", path, exc_info=error)
            self._show(with_split(self.view, name, str(error)))

        self._background.run(partial(split_for_model, path, n_ctx), said, refused)

    def _failed(self, error: BaseException) -> None:
        if not isinstance(error, ShardChatError):  # an unusable address says why; else a bug
            log.error("a lent computer could not be listed, added or removed", exc_info=error)
        self._show(failed(self.view, str(error)))

    def _show(self, view: LentComputersView) -> None:
        self.view = view
        self.box.show_view(view)
