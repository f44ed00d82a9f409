"""The OpenAI-compatible HTTP server: aiohttp on a thread and event loop of its own.

It runs beside whatever drives the engine (the GUI or `shardchat serve`):
requests are parsed here, handed to the engine worker (which owns the
model) as jobs, and their events come back through each request's
`ReplyChannel`: a stream's text straight to its socket from the worker, the
rest through the loop. So a busy GUI thread never stalls a stream and the
server never touches llama.cpp. Concurrent requests run together in the
worker's pool of sequences; past its slots and a bounded queue they are
refused with 429, bodies past the size limit with 413. A client that goes
away mid-stream is noticed at the next write to it, and its sequence is
cancelled at once.

Bound to 127.0.0.1 unless told otherwise; any other address needs an API key.
CORS answers only the origins the user lists.

This module keeps the routes; what every request passes through first (errors,
CORS, the key) is `app.api.middlewares`, and writing a reply, whole or as
server-sent events, is `app.api.reply_writer`. The Responses API
(/v1/responses) is a chat request in other words: `app.api.responses_request`
translates it, `app.api.openai_responses` writes its Response and events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from app.api.api_errors import ApiError, bad_request, context_exceeded, model_not_loaded
from app.api.api_streams import ApiStreams, PoolShape, ServedModel, model_id
from app.api.engine_calls import ApiJob, too_many_choices
from app.api.loop_thread_policy import give_way_on_waking
from app.api.middlewares import (
    auth_middleware,
    cors_middleware,
    error_middleware,
    quiet_malformed_requests,
)
from app.api.openai_replies import ReplyBuilder
from app.api.openai_request import ApiCall, parse_chat, parse_completion
from app.api.openai_responses import ResponseBuilder, write_response
from app.api.outbox import Outbox
from app.api.reply_channel import ReplyChannel
from app.api.reply_writer import write_stream, write_whole
from app.api.responses_request import parse_responses
from app.api.server_config import (
    SHUTDOWN_SECONDS,
    ServerConfig,
    ServerState,
)
from app.stores.model_library import ModelEntry, ModelLibrary
from engine.errors import BadInputError
from engine.generation.prompt_pieces import prompt_fits


class ApiEngine(Protocol):
    """What the server needs of the engine worker (app.engine_host.worker.EngineWorker): the
    API's side of the loaded model, a way in for a prepared request, and a way to end them all."""

    api: ApiStreams

    def serve_api(self, job: ApiJob) -> None: ...

    def close_api(self) -> None: ...


log = logging.getLogger("shardchat.api")

MAX_INT_DIGITS = 4300  # Python's limit on reading an integer from text (sys.int_info)


class ServerStartError(BadInputError):
    """The server could not listen (the port is taken, the address is not this machine's)."""


@dataclass
class _Counters:
    active: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class ApiServer:
    """Start it (blocks until listening, or raises ServerStartError), stop it."""

    def __init__(
        self,
        worker: ApiEngine,
        config: ServerConfig,
        on_state: Callable[[ServerState], None] | None = None,
    ) -> None:
        self.worker = worker
        self.config = config
        self._on_state = on_state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._outbox: Outbox | None = None  # made on the loop, in _listen
        self._thread: threading.Thread | None = None
        self._counters = _Counters()
        self.address: str | None = None
        worker.api.configure(PoolShape(config.n_slots, config.n_ctx_per_slot))

    @property
    def loop_wake_ups(self) -> int:
        """How many times the engine worker has woken the server's loop (tests read it)."""
        return self._outbox.doorbell.rings if self._outbox is not None else 0

    # --- the owner's thread ---

    def start(self) -> str:
        """Listen; the address (http://host:port). ServerStartError in one line if it cannot."""
        ready = threading.Event()
        problem: list[str] = []
        self._thread = threading.Thread(
            target=self._serve, args=(ready, problem), name="shardchat-api", daemon=True
        )
        self._thread.start()
        ready.wait()
        if problem:
            self._thread.join(5)
            raise ServerStartError(problem[0])
        assert self.address is not None
        self._publish()
        return self.address

    def stop(self) -> None:
        """Stop listening, end the requests in flight, free the API's KV cache."""
        self.worker.close_api()  # the streams in flight end with an error chunk
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            stopped = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
            stopped.result(timeout=SHUTDOWN_SECONDS + 10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
        outbox = self._outbox
        if self._runner is not None and outbox is not None:  # it listened: the worker hands
            self.worker.api.deliveries.remove(outbox.together)  # its loop nothing more
            self._runner = None
        if outbox is not None:
            outbox.close()
        self.address = None
        self._publish()

    @property
    def state(self) -> ServerState:
        running, waiting = self.worker.api.counts
        with self._counters.lock:
            active = self._counters.active
        return ServerState(self.address, active, max(active - running, waiting))

    # --- the server's thread ---

    def _serve(self, ready: threading.Event, problem: list[str]) -> None:
        give_way_on_waking()  # before the loop starts its executor's threads, which inherit it
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._listen())
        except Exception as exc:  # whatever stops it listening is said, never a hang in start()
            if isinstance(exc, OSError):
                problem.append(_listen_problem(self.config, exc))
            else:
                log.exception("the API server could not start")
                problem.append(f"the server could not start: {exc or type(exc).__name__}")
            ready.set()
            loop.close()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _listen(self) -> None:
        self._outbox = outbox = Outbox(asyncio.get_running_loop())
        quiet_malformed_requests()
        config = self.config
        app = web.Application(
            client_max_size=config.max_body_bytes,
            middlewares=[
                error_middleware(config.max_body_bytes),
                cors_middleware(config.cors_origins),
                auth_middleware(config.api_key),
            ],
        )
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/models/{id:.+}", self._model)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_get("/health", self._health)
        runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=SHUTDOWN_SECONDS
        )
        await runner.setup()
        site = web.TCPSite(runner, self.config.host, self.config.port, reuse_address=True)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        self.worker.api.deliveries.append(outbox.together)
        sockets = runner.addresses
        port = sockets[0][1] if sockets else self.config.port
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        self.address = f"http://{host}:{port}"
        log.info("listening on %s", self.address)

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _publish(self) -> None:
        if self._on_state is not None:
            try:
                self._on_state(self.state)
            except Exception:
                log.exception("server state callback failed")

    # --- handlers ---

    async def _health(self, _request: web.Request) -> web.Response:
        loaded = self.worker.api.model is not None
        return web.json_response({"status": "ok" if loaded else "no model loaded"})

    async def _models(self, _request: web.Request) -> web.Response:
        model = self.worker.api.model
        data = [_model_card(model, self._slot_context(model))] if model is not None else []
        if self.config.allow_model_switch:
            listed = {card["id"] for card in data}
            data += [
                _library_card(e) for e in await _library() if model_id(str(e.path)) not in listed
            ]
        return web.json_response({"object": "list", "data": data})

    async def _model(self, request: web.Request) -> web.Response:
        model: ServedModel | None = self.worker.api.model
        wanted = request.match_info["id"]
        if model is not None and model.answers_to(wanted):
            return web.json_response(_model_card(model, self._slot_context(model)))
        entry = await self._switchable(wanted)
        if entry is not None:
            return web.json_response(_library_card(entry))
        raise model_not_loaded(wanted, model.id if model else None)

    def _slot_context(self, model: ServedModel) -> int:
        """The tokens one request may use: the slot's context, within the trained one."""
        wanted = self.config.n_ctx_per_slot
        return min(wanted, model.context_length) if model.context_length else wanted

    async def _switchable(self, wanted: str) -> ModelEntry | None:
        """The library model a request names, when the user allows switching models."""
        if not self.config.allow_model_switch:
            return None
        for entry in await _library():
            if _as_served(entry).answers_to(wanted):
                return entry
        return None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_chat)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_completion)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        """The Responses API: a chat request in other words, on the same engine."""
        return await self._generate(request, parse_responses, responses=True)

    async def _generate(
        self, request: web.Request, parse: Callable[[Any], ApiCall], responses: bool = False
    ) -> web.StreamResponse:
        body = await _json_body(request)
        call = parse(body)
        if call.n > self.config.n_slots:  # the engine checks again, against its sequences
            raise too_many_choices(call.n, self.config.n_slots)
        model = self.worker.api.model
        switch_to = None
        # with switching allowed, any library model may be named, the loaded one included:
        # another request's switch may unload it before this one starts
        entry = await self._switchable(call.model)
        if entry is None and model is None:
            raise ApiError(503, "no model is loaded", "server_error", "model_not_loaded")
        if entry is None and model is not None and not model.answers_to(call.model):
            if self.config.allow_model_switch:  # several models to choose from: none matched
                raise model_not_loaded(call.model, model.id)
            # one model served: clients that send a fixed name get it, as llama-server does
            call = dataclasses.replace(call, model=model.id)
        if model is not None and entry is None:
            _check_fits(call, model, self._slot_context(model))
        if entry is not None:
            mmproj = str(entry.mmproj_path) if entry.mmproj_exists else None
            switch_to = (str(entry.path), mmproj)
        if self.config.log_prompts:
            log.info("prompt: %s", json.dumps(body)[:4000])
        with self._admitted():
            outbox = self._outbox
            assert outbox is not None  # it listens, so _listen made it
            channel = ReplyChannel(outbox)
            job = ApiJob(call, channel.send, switch_to=switch_to)
            served_as = model_id(switch_to[0]) if switch_to else model.id if model else call.model
            reply = ReplyBuilder(
                call.endpoint, served_as, call.include_usage, call.top_logprobs is not None,
                call.n,
            )  # fmt: skip
            # rendered and tokenised here, beside the engine's steps, not between them
            await asyncio.get_running_loop().run_in_executor(None, self.worker.api.prepare, job)
            self.worker.serve_api(job)
            try:
                if responses:
                    return await write_response(
                        request, channel, ResponseBuilder(served_as, call, body)
                    )
                if call.stream:
                    return await write_stream(request, channel, reply)
                return await write_whole(request, channel, reply)
            finally:
                job.cancel.cancel()  # a no-op once it ended; frees the sequence if not

    def _admitted(self) -> _Admission:
        return _Admission(self)


class _Admission:
    """Counts a request in flight; refuses it (429) past the slots and the queue."""

    def __init__(self, server: ApiServer) -> None:
        self._server = server

    def __enter__(self) -> None:
        counters, config = self._server._counters, self._server.config
        with counters.lock:
            if counters.active >= config.n_slots + config.max_queue:
                raise ApiError(
                    429, f"the server is busy: {counters.active} requests in flight; retry "
                    "shortly", "rate_limit_exceeded", "queue_full",
                )  # fmt: skip
            counters.active += 1
        self._server._publish()

    def __exit__(self, *_exc: object) -> None:
        counters = self._server._counters
        with counters.lock:
            counters.active -= 1
        self._server._publish()


async def _json_body(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw, parse_int=_integer)
    except RecursionError as exc:
        raise bad_request("the request body nests too deeply to be read") from exc
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise bad_request(f"the request body is not valid JSON ({exc})") from exc


def _integer(digits: str) -> int | float:
    """An integer too long for Python to read (4300 digits) as a float: infinity, which the
    field's own check then refuses by name, rather than a parse error that names none."""
    return int(digits) if len(digits) <= MAX_INT_DIGITS else float(digits)


def _check_fits(call: ApiCall, model: ServedModel, room: int) -> None:
    """Refuse, from its byte length alone, a prompt that cannot fit the context: no token is
    longer than the vocabulary's longest, so it takes at least bytes / that many tokens.
    A prompt of megabytes is refused at once instead of being tokenised on the engine's
    thread (stalling every stream) only to be refused then."""
    if not model.longest_token_bytes:
        return
    prompt = call.prompt
    texts = [prompt.text] if prompt.text is not None else [m["content"] for m in prompt.messages]
    size = sum(len(text.encode("utf-8")) for text in texts)
    at_least = size // model.longest_token_bytes
    if not prompt_fits(at_least, room):
        raise context_exceeded(room, f"at least {at_least}", call.endpoint)


async def _library() -> list[ModelEntry]:
    """The model library's language models whose files exist (SQLite: off the loop)."""

    def read() -> list[ModelEntry]:
        with ModelLibrary() as library:
            return [e for e in library.models() if e.exists]

    return await asyncio.get_running_loop().run_in_executor(None, read)


def _as_served(entry: ModelEntry) -> ServedModel:
    """A library model as it would be served, so a request names it as it names the loaded
    one (ServedModel.answers_to: its id, readable name or file name)."""
    return ServedModel(
        id=model_id(str(entry.path)),
        name=entry.readable_name,
        path=str(entry.path),
        context_length=0,
        vision=entry.mmproj_exists,
        created=0,
    )


def _library_card(entry: ModelEntry) -> dict[str, Any]:
    return {
        "id": model_id(str(entry.path)),
        "object": "model",
        "created": 0,
        "owned_by": "shardchat",
        "meta": {"name": entry.readable_name, "loaded": False, "vision": entry.mmproj_exists},
    }


def _model_card(model: ServedModel, n_ctx_per_slot: int) -> dict[str, Any]:
    return {
        "id": model.id,
        "object": "model",
        "created": model.created,
        "owned_by": "shardchat",
        "meta": {"name": model.name, "n_ctx_per_slot": n_ctx_per_slot, "vision": model.vision},
    }


def _listen_problem(config: ServerConfig, exc: OSError) -> str:
    where = f"{config.host}:{config.port}"
    if exc.errno == errno.EADDRINUSE:
        return f"port {config.port} is already in use on {config.host}; choose another (--port)"
    if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
        return f"cannot listen on {where}: not an address of this machine"
    if exc.errno == errno.EACCES:
        return f"cannot listen on {where}: permission denied (ports below 1024 need root)"
    return f"cannot listen on {where}: {exc.strerror or exc}"
