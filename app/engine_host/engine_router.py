"""The window's engine: the worker in this process, or a child engine for a model split
onto lent computers.

Every window request goes through here, numbered here, to whichever engine holds the
model. With "Run models across these computers" on, a load goes to a child process
(app.engine_host.child_engine), because llama.cpp's RPC client aborts the process that uses a
lent computer when it dies: the child dies instead of the window. Then every request
it left unanswered fails with one line, EngineLost says which lent computers stopped
answering, and the next load leaves them out, so the window reloads and the
conversation (which the window holds) goes on. While the model is split, the API
server and the VRAM slider stay on this machine: they plan for its own model.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable

from app.api.engine_calls import ApiJob
from app.engine_host.child_engine import ChildEnded, ChildEngine, LentLoad
from app.engine_host.engine_client import EngineClient
from app.engine_host.engine_requests import (
    CloseApi,
    LoadModel,
    LoadPlanned,
    SetBudget,
    SetPlacement,
    UnloadModel,
)
from app.engine_host.events import FINAL_EVENTS, EngineEvent, EngineLost, RequestFailed
from app.engine_host.worker import EngineWorker
from app.lent.computers import reached_computers
from engine.errors import BadInputError

log = logging.getLogger(__name__)

SPLIT_PLACEMENT = (
    "the model runs across the lent computers, split as planned for them: turn off "
    "'Run models across these computers' to place it on this computer"
)
API_REFUSED = "the window's model runs across lent computers; the API loads models here only"


class EngineRouter(EngineClient):
    """Start it, submit requests as to an EngineWorker, read events, shut it down."""

    def __init__(self, on_event: Callable[[EngineEvent], None]) -> None:
        self._on_event = on_event
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._ours: set[int] = set()  # requests of the router's own: their events stay here
        self.here = EngineWorker(self._from_here)
        self.api = self.here.api
        self._switch_for_api = self.api.switch_model
        self.api.switch_model = self._api_switch
        self._child: ChildEngine | None = None
        self._lent = False
        self.here_bytes: int | None = None  # this machine's part of a split; None: the
        # memory free at the load less a margin (app.lent.split.default_here_budget)
        self._left_out: frozenset[str] = frozenset()

    def start(self) -> EngineRouter:
        self.here.start()
        return self

    def use_lent_computers(self, on: bool) -> None:
        """From the next load on, split models onto the lent computers (or not); computers
        left out after they died count again."""
        with self._lock:
            self._lent, self._left_out = on, frozenset()

    def serve_api(self, job: ApiJob) -> None:
        self.here.serve_api(job)

    def cancel(self, request_id: int | None = None) -> None:
        child = self._child
        if child is not None:
            child.cancel(request_id)
        self.here.cancel(request_id)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop both engines; a child is waited for (up to `timeout`), so nothing of a
        split model stays after the window."""
        child = self._end_child()
        if child is not None:
            child.wait(timeout)
        self.here.shutdown(timeout)

    @property
    def is_running(self) -> bool:
        return self.here.is_running

    def _submit(self, request: object) -> int:
        with self._lock:
            request_id = next(self._ids)
            lent, child = self._lent, self._child
        if isinstance(request, LoadPlanned) and lent:
            self._load_across(request_id, request)
        elif isinstance(request, (LoadModel, LoadPlanned)):
            self._end_child()
            self.here.submit_as(request_id, request)
        elif child is None or isinstance(request, CloseApi):
            self.here.submit_as(request_id, request)
        elif isinstance(request, (SetBudget, SetPlacement)):
            self._on_event(RequestFailed(request_id, SPLIT_PLACEMENT, bad_input=True))
        else:
            child.submit_as(request_id, request)
        return request_id

    def _load_across(self, request_id: int, request: LoadPlanned) -> None:
        """The model leaves this process (its memory is the split's now) for a new child."""
        self._end_child()
        with self._lock:
            unloading = next(self._ids)
            self._ours.add(unloading)
        self.here.submit_as(unloading, UnloadModel())
        with self._lock:
            load = LentLoad(request_id, request.request, self._left_out, self.here_bytes)
            self._child = ChildEngine(load, self._on_event, self._child_ended)

    def _from_here(self, event: EngineEvent) -> None:
        with self._lock:
            ours = event.request_id in self._ours
            if ours and isinstance(event, FINAL_EVENTS):
                self._ours.discard(event.request_id)
        if not ours:
            self._on_event(event)

    def _end_child(self) -> ChildEngine | None:
        """Stop the child engine, if one runs, without waiting for it; which it was."""
        with self._lock:
            child, self._child = self._child, None
        if child is not None:
            child.stop()
        return child

    def _api_switch(self, model_path: str, mmproj_path: str | None) -> None:
        if self._child is not None:
            raise BadInputError(API_REFUSED)
        assert self._switch_for_api is not None
        self._switch_for_api(model_path, mmproj_path)

    def _child_ended(self, child: ChildEngine, ended: ChildEnded) -> None:
        """On the child's reader thread: fail what it left unanswered, and say why."""
        log.info("the child engine %d %s (%s)", child.pid, ended.reason, ended.last_error)
        with self._lock:
            stopped = child is not self._child
            if not stopped:
                self._child = None
        if stopped:  # replaced or stopped on purpose: nothing died under the user
            for request_id in ended.unanswered:
                self._on_event(RequestFailed(request_id, "the model was unloaded", False))
            return
        gone = self._gone(ended.using)
        loading = child.load.load_id in ended.unanswered
        what = (
            f"the lent computer {', '.join(gone)} stopped answering"
            if gone
            else f"the model's engine process {ended.reason}"
        )
        for request_id in ended.unanswered:
            during = "while the model loaded" if request_id == child.load.load_id else "mid-reply"
            self._on_event(RequestFailed(request_id, f"{what} {during}", bad_input=False))
        with self._lock:
            self._left_out |= frozenset(gone)
        reload = bool(gone) or not loading
        then = "the model reloads without it" if gone else "the model reloads"
        message = f"{what}: the conversation is kept" + (f", and {then}" if reload else "")
        self._on_event(EngineLost(0, message, gone, reload))

    @staticmethod
    def _gone(using: tuple[str, ...]) -> tuple[str, ...]:
        """Which of the computers the split used do not answer now (each probe is ours,
        bounded in time: never llama.cpp's client)."""
        with reached_computers(log.info) as reached:
            answering = {computer.address for computer in reached}
        return tuple(address for address in using if address not in answering)
