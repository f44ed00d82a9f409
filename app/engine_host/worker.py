"""The engine worker: one thread, one loop, owning the one resident model.

Every other thread talks to the model through this worker's one request
queue and hears back through a single event callback, so the GUI thread
never blocks on llama.cpp and nothing else ever touches the model. Each turn
of the loop takes what was asked, lets each activity admit its streams into
the model's scheduler (the conversation's turn first, then API clients, then
a summary job's documents), runs one step that carries them all, and lets
each activity hand out what its streams said. Requests that replace or
re-plan the model wait until no conversation turn or job uses it; while a job
runs, messages pass them. Cancelling is the one thing that bypasses the
queue: it flips the request's token at once, which the scheduler watches
between steps and which raises the abort flag llama.cpp reads inside one.
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import threading
from collections.abc import Callable

from app.api.api_streams import ApiStreams
from app.api.engine_calls import ApiJob
from app.engine_host.activities import Activity, ConversationTurn, SummaryRun
from app.engine_host.engine_client import EngineClient
from app.engine_host.engine_requests import (
    CHAT_REQUESTS,
    CONTROL_REQUESTS,
    CloseApi,
    Queued,
    SendMessage,
    Stop,
    Summarize,
    Wake,
)
from app.engine_host.events import EngineEvent, JobProgressed, RequestFailed
from app.engine_host.model_controls import ModelControls
from app.model_lifecycle.resident_model import ResidentModel
from engine.errors import BadInputError

log = logging.getLogger(__name__)

EventCallback = Callable[[EngineEvent], None]


class EngineWorker(EngineClient):
    """Start it, submit requests (each returns its id), read events, shut it down."""

    def __init__(self, on_event: EventCallback, name: str = "shardchat-engine") -> None:
        self._on_event = on_event
        self._queue: queue.Queue[Queued] = queue.Queue()
        self._waiting: collections.deque[Queued] = collections.deque()  # taken, not started
        self._ids = itertools.count(1)
        self._pending: dict[int, Queued] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._resident = ResidentModel()
        self._turn: Activity | None = None  # the conversation's reply
        self._job: Activity | None = None  # a summary job
        self.api = ApiStreams()
        self._controls = ModelControls(self._resident, self.api, self._emit)
        self.api.switch_model = self._controls.switch_for_api
        self.api.make_pool = self._controls.make_pool
        self._resident.before_close.append(self.api.unloaded)

    # --- the caller's side (any thread) ---

    def start(self) -> EngineWorker:
        self._thread.start()
        return self

    def serve_api(self, job: ApiJob) -> None:
        """Run an API request (from the server's thread); its events go to `job.sink`.

        API requests do not queue behind chat: they run in the context's parallel
        sequences, riding the same steps as whatever else runs."""
        self.api.submit(job)
        self._queue.put(Queued(0, Wake()))

    def cancel(self, request_id: int | None = None) -> None:
        """Cancel one request, or every queued and running one when no id is given."""
        with self._lock:
            targets = list(self._pending.values())
        for entry in targets:
            if request_id is None or entry.request_id == request_id:
                entry.cancel.cancel()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Cancel what runs, stop the thread and free the model."""
        if not self._thread.is_alive():
            return
        self.cancel()
        self._queue.put(Queued(0, Stop()))
        self._thread.join(timeout)

    @property
    def is_running(self) -> bool:
        return self._thread.is_alive()

    def submit_as(self, request_id: int, request: object) -> None:
        """Queue a request under an id its caller chose (the window's router numbers the
        requests of both its engines, and a child engine takes its parent's numbers)."""
        entry = Queued(request_id, request)
        with self._lock:
            self._pending[entry.request_id] = entry
        self._queue.put(entry)

    def _submit(self, request: object) -> int:
        request_id = next(self._ids)
        self.submit_as(request_id, request)
        return request_id

    # --- the worker thread: one loop ---

    def _run(self) -> None:
        try:
            while self._take_requests():
                self._start_ready()
                try:
                    self._advance()
                    self._step()
                finally:
                    self.api.release()  # a step that did not run held the API's events
        finally:
            self._end_activities("the engine stopped")
            self.api.close("the engine stopped")
            self._resident.close()

    @property
    def _busy(self) -> bool:
        return self._turn is not None or self._job is not None or self.api.busy

    def _take_requests(self) -> bool:
        """Move what was asked into the waiting line, waiting on the queue only when nothing
        runs and nothing waits that could start; False once asked to stop."""
        block = not self._busy and not self._waiting
        while True:
            try:
                entry = self._queue.get(block=block)
            except queue.Empty:
                return True
            block = False
            if isinstance(entry.request, Stop):
                return False
            if isinstance(entry.request, CloseApi):
                self.api.close("the server stopped")
                self._done(entry)
            elif not isinstance(entry.request, Wake):
                self._waiting.append(entry)

    def _start_ready(self) -> None:
        """Start waiting requests in order: a control once no turn or job uses the model, a
        message once the conversation is free. A control that must wait holds back what
        came after it, except messages while only a job holds it back."""
        blocked_by_job = False
        for entry in list(self._waiting):
            request = entry.request
            if isinstance(request, CONTROL_REQUESTS):
                if self._turn is not None or self._job is not None:
                    if self._turn is not None:
                        return
                    blocked_by_job = True
                    continue
                if blocked_by_job:
                    continue
            elif isinstance(request, CHAT_REQUESTS):
                if self._turn is not None:
                    if blocked_by_job:
                        continue
                    return
            elif isinstance(request, Summarize) and (self._job is not None or self._pool_wait()):
                if blocked_by_job:
                    continue
                return
            self._waiting.remove(entry)
            self._start(entry)

    def _pool_wait(self) -> bool:
        """A job must wait for the conversation's turn: its pool re-creates the context."""
        return self._turn is not None and self._controls.needs_pool()

    def _start(self, entry: Queued) -> None:
        request = entry.request
        try:
            if isinstance(request, SendMessage):
                self._turn = self._begin_turn(entry, request)
            elif isinstance(request, Summarize):
                self._job = self._begin_job(entry, request)
            else:
                self._controls.run(entry)
                self._done(entry)
        except Exception as exc:
            self._failed(entry, exc)

    def _advance(self) -> None:
        """Each activity hands out what the last step gave it and admits what is next."""
        if self._turn is not None and not self._turn.advance():
            self._turn = None
        try:
            self.api.advance(self._resident.model, may_switch=self._turn is None and not self._job)
        except Exception:  # a bug must not kill the worker: end the API's streams
            log.exception("API streams failed")
            self.api.close("internal error while generating")
        if self._job is not None and not self._job.advance():
            self._job = None

    def _step(self) -> None:
        model = self._resident.model
        if model is None or not model.scheduler.active():
            return
        try:
            model.scheduler.step(before_decode=self.api.release)
        except Exception:  # a bug must not kill the worker: what ran in the step ends
            log.exception("decode step failed")
            for stream in model.scheduler.active():
                model.scheduler.retire(stream)

    # --- activities ---

    def _begin_turn(self, entry: Queued, request: SendMessage) -> Activity:
        turn = self._controls.conversation().begin(
            request.text, request.settings, entry.cancel, request.images, request.thinking
        )
        return ConversationTurn(entry, turn, self._resident, self._emit, self._ended)

    def _begin_job(self, entry: Queued, request: Summarize) -> Activity:
        from app.summaries.summary_job import SummaryJob  # its readers: with the first summary

        self._controls.make_pool()
        job = SummaryJob(
            self._resident.require(), request.input_folder, request.output_folder,
            request.settings,
            progress=lambda progress: self._emit(JobProgressed(entry.request_id, progress)),
            cancel=entry.cancel, plan=self._resident.plan, profile=self._resident.profile,
        )  # fmt: skip
        return SummaryRun(entry, job.steps(), self._emit, self._ended)

    def _end_activities(self, reason: str) -> None:
        """The worker stops: a turn in progress and a job end where they are."""
        for activity in (self._turn, self._job):
            if activity is not None:
                activity.end()
        self._turn = self._job = None
        log.debug("activities ended: %s", reason)

    def _ended(self, entry: Queued, failure: Exception | None) -> None:
        if failure is None:
            self._done(entry)
        else:
            self._failed(entry, failure)

    # --- events ---

    def _done(self, entry: Queued) -> None:
        with self._lock:
            self._pending.pop(entry.request_id, None)

    def _failed(self, entry: Queued, exc: Exception) -> None:
        if isinstance(exc, BadInputError):
            self._emit(RequestFailed(entry.request_id, str(exc), bad_input=True))
        else:  # a bug must not kill the worker: report it and go on
            log.error("request %d failed", entry.request_id, exc_info=exc)
            self._emit(RequestFailed(entry.request_id, f"internal error: {exc}", bad_input=False))
        self._done(entry)

    def _emit(self, event: EngineEvent) -> None:
        try:
            self._on_event(event)
        except Exception:
            log.exception("event callback failed on %r", event)
