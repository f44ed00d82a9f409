"""The window's engine, started before the window: its model loads while Qt is imported
and the window is built.

Python runs one thread at a time, but llama.cpp's load runs in C with the interpreter
free. Queued before Qt is imported, the load's C part (about 150 ms for the built-in
model here) passes under the window's imports and first layout instead of after them
(`make bench-startup`). Until the window's bridge exists, the engine's events are held
here, then passed on in the order they came.

Only a machine profiled already starts this way: on a first launch the wizard comes
first (its profiling must have the machine to itself, and it may choose the model).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from app.engine_host.engine_router import EngineRouter
from app.engine_host.events import EngineEvent
from app.interpreter_sharing import share_the_interpreter_at_once
from app.machine_profile import this_machine_profile
from app.model_lifecycle.load_planning import LoadRequest
from app.stores.model_library import ModelLibrary
from engine.machine.hardware import probe_hardware

EventCallback = Callable[[EngineEvent], None]


class HeldEvents:
    """The engine's event callback until the window takes over: holds events, then passes
    them on in order, and every later one straight after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[EngineEvent] = []
        self._to: EventCallback | None = None

    def __call__(self, event: EngineEvent) -> None:
        with self._lock:
            to = self._to
            if to is None:
                self._held.append(event)
                return
        to(event)

    def pass_to(self, callback: EventCallback) -> None:
        """From now on events go to `callback`, those held first (an event that comes
        meanwhile waits for them)."""
        with self._lock:
            for event in self._held:
                callback(event)
            self._held.clear()
            self._to = callback

    @property
    def held(self) -> int:
        with self._lock:
            return len(self._held)


@dataclass
class EarlyEngine:
    """A started engine, its model's load queued; the window adopts all of it."""

    engine: EngineRouter
    events: HeldEvents
    load: LoadRequest
    request_id: int  # the load's


def start_engine_early(model_path: str, n_ctx: int) -> EarlyEngine | None:
    """The engine with `model_path`'s load queued, planned from this machine's profile;
    None where the machine was never profiled (the wizard comes first)."""
    profile = this_machine_profile(probe_hardware())
    if profile is None:
        return None
    with ModelLibrary() as models:
        mmproj = models.projector_of(model_path)
    events = HeldEvents()
    engine = EngineRouter(events).start()
    load = LoadRequest(
        model_path, n_ctx, profile, mmproj_path=None if mmproj is None else str(mmproj)
    )
    request_id = engine.load_planned(load)
    share_the_interpreter_at_once()  # the load's log lines wait for it beside the imports
    return EarlyEngine(engine, events, load, request_id)
