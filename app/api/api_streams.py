"""The API's streams on the engine worker: an inbox any thread fills, a pool the worker admits.

Before each step of its one loop the worker calls `advance`: what the last
step said goes to each client, ended requests are finished, and arrivals
are admitted to the pool, whose streams ride the same llama_decode as the
conversation's turn and a summary job's documents. The pool lives in the
loaded model's parallel sequences: made when a model is loaded, let go
before it is freed.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.api.api_errors import ApiError, bad_request, model_not_loaded, server_error
from app.api.engine_calls import ApiFailed, ApiJob, ServedJob, admit, prepare
from engine.errors import BadInputError, ShardChatError
from engine.llama.vocabulary import longest_token_bytes
from engine.model.model_naming import readable_model_name
from engine.runtime.loaded_model import LoadedModel
from engine.serving.stream_pool import PoolEntry, StreamPool

log = logging.getLogger(__name__)

DEFAULT_SLOTS = 4
DEFAULT_CTX_PER_SLOT = 4096


@dataclass(frozen=True)
class ServedModel:
    """The loaded model as /v1/models lists it; published by the worker for the server."""

    id: str
    name: str
    path: str
    context_length: int  # what the model was trained for (0: unknown)
    vision: bool
    created: int
    longest_token_bytes: int = 0  # of the vocabulary's tokens (0: unknown)

    def answers_to(self, requested: str) -> bool:
        wanted = requested.strip().lower()
        names = {self.id.lower(), self.name.lower(), Path(self.path).name.lower()}
        return wanted in names


def model_id(path: str) -> str:
    """A model's id in the API: its file name without .gguf (split parts' suffix dropped)."""
    stem = Path(path).name.removesuffix(".gguf")
    head, sep, tail = stem.rpartition("-of-")
    if sep and tail.isdigit() and head[-5:].isdigit():
        stem = head[:-6]
    return stem


@dataclass(frozen=True)
class PoolShape:
    n_slots: int = DEFAULT_SLOTS
    n_ctx_per_slot: int = DEFAULT_CTX_PER_SLOT


class ApiStreams:
    """What the worker needs to serve API jobs; only `submit` and `configure` may be called
    from other threads."""

    def __init__(self) -> None:
        self._inbox: collections.deque[ApiJob] = collections.deque()  # appends are atomic
        self.shape = PoolShape()
        self._pool: StreamPool | None = None
        self._served: dict[int, ServedJob] = {}
        self.model: ServedModel | None = None  # read by the server's thread
        # jobs waiting for the model they name, which is loaded once the pool is idle
        self._switching: collections.deque[ApiJob] = collections.deque()
        self.switch_model: Callable[[str, str | None], None] | None = None  # set by the worker
        # gives the loaded model the shared pool its clients need (set by the worker): the
        # context is made without one, and the first client waits for it like a switch
        self.make_pool: Callable[[], None] | None = None
        # the loaded model for prompts tokenised on other threads; held while one is, so the
        # model is not freed under it (unloading waits)
        self._tokenizer_lock = threading.Lock()
        self._tokenizer_model: LoadedModel | None = None
        # a step's events are handed out inside one block of each (the server's
        # Outbox.together), so its loop wakes once a step, not once a stream; the blocks
        # stay open until `release`, when llama.cpp starts computing the next step
        self.deliveries: list[Callable[[], contextlib.AbstractContextManager[None]]] = []
        self._holding: contextlib.ExitStack | None = None

    # --- any thread ---

    def submit(self, job: ApiJob) -> None:
        self._inbox.append(job)

    def prepare(self, job: ApiJob) -> None:
        """Render and tokenise a text prompt on the calling thread (the server's executor),
        so a long prompt never holds up the engine's steps; images are prepared by the
        engine, which owns the vision encoder. ApiError when the prompt cannot be rendered."""
        if job.call.prompt.images or job.switch_to is not None:
            return
        with self._tokenizer_lock:
            model = self._tokenizer_model
            if model is not None:
                job.prepared = prepare(job.call, model)

    def configure(self, shape: PoolShape) -> None:
        """Slots and context per slot the server asks for: requests run within them, and
        within what the loaded model's context was shaped to hold (ContextShape at load)."""
        self.shape = shape

    # --- the worker's thread ---

    @property
    def busy(self) -> bool:
        return bool(self._inbox or self._switching) or self._pool is not None and self._pool.busy

    @property
    def counts(self) -> tuple[int, int]:
        """(running, waiting) streams of the pool."""
        return self._pool.counts if self._pool is not None else (0, 0)

    def loaded(self, model: LoadedModel) -> None:
        with self._tokenizer_lock:
            self._tokenizer_model = model
        self._pool = StreamPool(model, self.shape.n_slots, self.shape.n_ctx_per_slot)
        log.info(
            "API streams: %d sequences sharing %d cells", self._pool.n_slots,
            self._pool.n_ctx_per_slot,
        )  # fmt: skip
        path = str(model.params.model_path)
        trained = model.inventory.context_length
        self.model = ServedModel(
            id=model_id(path),
            name=readable_model_name(path, model.inventory.name),
            path=path,
            context_length=trained or 0,
            vision=model.vision is not None,
            created=int(Path(path).stat().st_mtime) if Path(path).exists() else 0,
            longest_token_bytes=model.inventory.longest_token_bytes
            or longest_token_bytes(model.handle.vocab),  # no token list in its header
        )

    def advance(self, model: LoadedModel | None, may_switch: bool = False) -> None:
        """Before a step: send what the last one said, finish what ended, admit arrivals;
        with `may_switch` (nothing else uses the model), load the model waiting requests
        name once the pool is idle. What is sent is held until `release`."""
        self.release()
        holding = contextlib.ExitStack()
        for delivery in list(self.deliveries):
            holding.enter_context(delivery())
        self._holding = holding
        self._advance(model, may_switch)

    def release(self) -> None:
        """Hand what `advance` sent to the servers' loops. The worker calls it just before
        llama.cpp computes the next step (Scheduler.step's `before_decode`), so the loops
        write while the step computes without the GIL, and after a step in case none ran.
        Woken earlier, a loop took the GIL from the worker while it built the step, and
        the two ran in turn: 1 client streamed about 12% slower. A stream under way does
        not wait for this: its text went straight to its socket (app.api.reply_channel)."""
        holding, self._holding = self._holding, None
        if holding is not None:
            holding.close()

    def _advance(self, model: LoadedModel | None, may_switch: bool) -> None:
        pool = self._pool
        if pool is not None:  # the server may have been (re)configured since the load
            shape = self.shape
            pool.limit(shape.n_slots, shape.n_ctx_per_slot)
        if pool is not None and pool.busy:
            ended = pool.collect()
            for key, served in list(self._served.items()):
                self._guarded(served, served.pump, key)
            self._finish(ended)
        self._admit(model)
        pool = self._pool
        if pool is None or not pool.busy:
            if may_switch:
                self._switch_when_idle(model)
            return
        self._finish(pool.admit())

    def _finish(self, ended: list[PoolEntry]) -> None:
        for entry in ended:
            done = self._served.pop(id(entry), None)
            if done is not None:
                self._guarded(done, done.finish)

    def close(self, reason: str) -> None:
        """End every job (`reason` as their error); their sequences are freed."""
        while self._inbox or self._switching:
            queued = self._inbox or self._switching
            queued.popleft().sink(ApiFailed(ApiError(503, reason, "server_error")))
        if self._pool is not None:
            for entry in self._pool.close(reason):
                gone = self._served.pop(id(entry), None)
                if gone is not None:
                    gone.finish()
        self._served.clear()

    def unloaded(self) -> None:
        with self._tokenizer_lock:  # waits for a prompt being tokenised on another thread
            self._tokenizer_model = None
        waiting = list(self._switching)  # they wait for a model: the switch itself unloads
        self._switching.clear()
        self.close("the model was unloaded or replaced; send the request again")
        self._pool = None
        self._switching.extend(waiting)
        self.model = None

    def _admit(self, model: LoadedModel | None) -> None:
        while self._inbox:
            job = self._inbox.popleft()
            if job.cancel.cancelled:
                continue
            if self._switching or self._needs_switch(job) or self._needs_pool(model):
                self._switching.append(job)  # in order: later jobs wait behind a switch
                continue
            try:
                loaded = self._require_model(job, model)
                choices = admit(job, loaded, self._pool_of(loaded))
            except ApiError as exc:
                job.sink(ApiFailed(exc))
                continue
            except BadInputError as exc:  # the engine refused what the request asked
                job.sink(ApiFailed(bad_request(str(exc))))
                continue
            except Exception as exc:  # a bug: this request fails, never the others
                log.exception("%s could not be prepared", job.label)
                job.sink(ApiFailed(server_error(f"the request could not be prepared: {exc!r}")))
                continue
            for served in choices:
                self._served[id(served.entry)] = served

    def _guarded(self, served: ServedJob, send: Callable[[], None], key: int | None = None) -> None:
        """Turn a stream's output into events; a failure there ends that stream alone."""
        try:
            send()
        except Exception as exc:
            log.exception("%s failed while its reply was sent", served.job.label)
            served.job.cancel.cancel()  # the pool frees its sequence at the next step
            if key is not None:
                self._served.pop(key, None)
            served.job.sink(ApiFailed(server_error(f"the reply could not be sent: {exc!r}")))

    def _needs_switch(self, job: ApiJob) -> bool:
        served = self.model
        wanted = job.call.model
        return job.switch_to is not None and (served is None or not served.answers_to(wanted))

    def _needs_pool(self, model: LoadedModel | None) -> bool:
        """The loaded model's context has no cells for the API's clients yet."""
        return model is not None and self.make_pool is not None and model.pool_cells == 0

    def _switch_when_idle(self, model: LoadedModel | None) -> None:
        """With the pool idle, load the model the first waiting job names, or make the shared
        pool the loaded one lacks; then every waiting job is admitted again (one for yet
        another model waits for the next switch)."""
        if not self._switching:
            return
        first: ApiJob | None = self._switching.popleft()
        assert first is not None
        if self._needs_switch(first):
            first = self._switched_for(first)
        elif self._needs_pool(model):
            first = self._pooled_for(first)
        waiting = ([first] if first is not None else []) + list(self._switching)
        self._switching.clear()
        self._inbox.extendleft(reversed(waiting))

    def _switched_for(self, job: ApiJob) -> ApiJob | None:
        """Load the model `job` names; the job, or None when it was failed."""
        assert job.switch_to is not None
        path, mmproj = job.switch_to
        if self.switch_model is None:
            job.sink(ApiFailed(self._not_loaded(job)))
            return None
        log.info("API: loading %s for %s", path, job.label)
        try:
            self.switch_model(path, mmproj)
        except ShardChatError as exc:
            job.sink(ApiFailed(ApiError(400, f"could not load {job.call.model!r}: {exc}")))
            return None
        if self._needs_switch(job):  # loaded, yet under another name: never load it again
            job.sink(ApiFailed(self._not_loaded(job)))
            return None
        return job

    def _pooled_for(self, job: ApiJob) -> ApiJob | None:
        """Make the pool `job` waits for; the job, or None when it was failed."""
        assert self.make_pool is not None
        try:
            self.make_pool()
        except ShardChatError as exc:  # the budget cannot hold the pool beside the model
            job.sink(ApiFailed(ApiError(503, f"no room for the API's clients: {exc}")))
            return None
        return job

    def _not_loaded(self, job: ApiJob) -> ApiError:
        return model_not_loaded(job.call.model, self.model.id if self.model else None)

    def _require_model(self, job: ApiJob, model: LoadedModel | None) -> LoadedModel:
        served = self.model
        if model is None or served is None:
            raise ApiError(503, "no model is loaded", "server_error", "model_not_loaded")
        if not served.answers_to(job.call.model):
            raise model_not_loaded(job.call.model, served.id)
        return model

    def _pool_of(self, model: LoadedModel) -> StreamPool:
        pool = self._pool
        if pool is None or pool.model is not model or pool.n_slots == 0:
            raise ApiError(
                503, "the model was loaded without parallel sequences for API clients",
                "server_error", "no_memory",
            )  # fmt: skip
        return pool
