"""A real engine worker with a real model behind a real server on a loopback port, for the API
tests: `Serving` starts them and gives an `openai` client pointed at the server."""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field

import openai

from app.api.server import ApiServer
from app.api.server_config import ServerConfig
from app.engine_host.events import (
    ConversationStarted,
    EngineEvent,
    JobFinished,
    ModelLoaded,
    ReplyFinished,
    RequestFailed,
)
from app.engine_host.worker import EngineWorker
from app.model_lifecycle.load_planning import ContextShape, LoadRequest
from engine.machine.profile import Profile

FINAL = (ReplyFinished, JobFinished, RequestFailed, ConversationStarted)


@dataclass
class Serving:
    worker: EngineWorker
    server: ApiServer
    model_id: str
    events: queue.Queue[EngineEvent]
    api_key: str = "unused"
    clients: list[openai.OpenAI] = field(default_factory=list)
    loaded: ModelLoaded | None = None

    @property
    def base_url(self) -> str:
        assert self.server.address is not None
        return f"{self.server.address}/v1"

    def client(self, api_key: str | None = None, timeout: float = 120) -> openai.OpenAI:
        made = openai.OpenAI(
            base_url=self.base_url, api_key=api_key or self.api_key, timeout=timeout,
            max_retries=0,
        )  # fmt: skip
        self.clients.append(made)
        return made

    def async_client(self, timeout: float = 120) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=self.base_url, api_key=self.api_key, timeout=timeout, max_retries=0
        )

    def wait_for(self, request_id: int, timeout: float = 300) -> EngineEvent:
        """The worker's final event for a request (progress events on the way are kept)."""
        while True:
            event = self.events.get(timeout=timeout)
            if getattr(event, "request_id", None) == request_id and isinstance(event, FINAL):
                return event

    def close(self) -> None:
        for made in self.clients:
            made.close()
        self.server.stop()
        self.worker.shutdown()


def start_serving(
    model_path: str,
    mmproj: str | None = None,
    n_ctx: int = 1024,
    n_slots: int = 4,
    n_ctx_per_slot: int = 1024,
    profile: Profile | None = None,
    shape: ContextShape | None = None,
    **config: object,
) -> Serving:
    """Load the model on a new worker, its context shaped for the server as `shardchat serve`
    shapes it (or as `shape` says), and serve it on a free loopback port. With a `profile`
    the load is planned, and each reply carries the step log's records."""
    events: queue.Queue[EngineEvent] = queue.Queue()
    worker = EngineWorker(events.put).start()
    settings = {"port": 0, "n_slots": n_slots, "n_ctx_per_slot": n_ctx_per_slot, **config}
    shape = shape or ContextShape.for_server(n_slots, n_ctx_per_slot)
    request_id = worker.load_planned(
        LoadRequest(model_path, n_ctx, profile, None, mmproj, n_threads=2, shape=shape)
    )
    while True:
        event = events.get(timeout=120)
        if getattr(event, "request_id", None) != request_id:
            continue
        if isinstance(event, RequestFailed):
            worker.shutdown()
            raise RuntimeError(event.message)
        assert isinstance(event, ModelLoaded)
        loaded = event
        break
    server = ApiServer(worker, ServerConfig(**settings))  # type: ignore[arg-type]
    server.start()
    assert worker.api.model is not None
    key = str(config.get("api_key") or "unused")
    return Serving(worker, server, worker.api.model.id, events, key, loaded=loaded)


class LogWatch(logging.Handler):
    """Waits for a log record whose message holds a text (records come from any thread)."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.DEBUG)
        self.text = text
        self.seen = threading.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.messages.append(message)
        if self.text in message:
            self.seen.set()

    def __enter__(self) -> LogWatch:
        root = logging.getLogger()
        self._level = root.level
        root.setLevel(logging.DEBUG)
        root.addHandler(self)
        return self

    def __exit__(self, *_exc: object) -> None:
        root = logging.getLogger()
        root.removeHandler(self)
        root.setLevel(self._level)
