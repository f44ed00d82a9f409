"""The OpenAI-compatible HTTP server: aiohttp on a thread and event loop of its own.

It runs beside whatever drives the engine (the GUI or `shardchat serve`):
requests are parsed here, handed to the engine worker (which owns the
model) as jobs, and their events come back through the loop's thread-safe
queue, so a busy GUI thread never stalls a stream and the server never
touches llama.cpp. Concurrent requests run together in the worker's pool of
sequences; past its slots and a bounded queue they are refused with 429,
bodies past the size limit with 413. A client that goes away mid-stream
has its handler cancelled by aiohttp, which cancels its sequence at once.

Bound to 127.0.0.1 unless told otherwise; any other address needs an API key.
CORS answers only the origins the user lists.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import hmac
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from app.api.api_errors import (
    ApiError,
    bad_request,
    context_exceeded,
    not_found,
    server_error,
)
from app.api.api_streams import PoolShape, ServedModel, model_id
from app.api.engine_calls import ApiDelta, ApiEvent, ApiFailed, ApiFinished, ApiJob
from app.api.openai_replies import ReplyBuilder
from app.api.openai_request import ApiCall, parse_chat, parse_completion
from app.model_library import ModelEntry, ModelLibrary
from engine.errors import BadInputError

if TYPE_CHECKING:
    from app.worker import EngineWorker

log = logging.getLogger("shardchat.api")

LOOPBACK = ("127.0.0.1", "localhost", "::1")
DEFAULT_PORT = 8088
MAX_BODY_BYTES = 32 * 2**20  # room for a few data-URL images
MAX_INT_DIGITS = 4300  # Python's limit on reading an integer from text (sys.int_info)
SHUTDOWN_SECONDS = 2.0  # streams still open when the server stops are cut after this
USAGE_WORDS = web.RequestKey("usage_words", str)  # what the request log says of the tokens


class _MalformedRequestsInOneLine(logging.Filter):
    """aiohttp logs a request its parser refuses (a bad request line, a flood of headers) as
    an ERROR with a traceback, though it answers it with a 400 itself: that is the client's
    mistake, one WARNING line. Records of other failures pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        problem = record.exc_info[1] if record.exc_info else None
        if isinstance(problem, HttpProcessingError):
            where = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            words = " ".join(str(problem.message or type(problem).__name__).split())[:200]
            record.msg, record.args = "refused a malformed request from %s: %s", (where, words)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True


_MALFORMED_REQUESTS = _MalformedRequestsInOneLine()


class ServerStartError(BadInputError):
    """The server could not listen (the port is taken, the address is not this machine's)."""


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    n_slots: int = 4
    n_ctx_per_slot: int = 4096
    max_queue: int = 32  # requests waiting for a slot before 429
    max_body_bytes: int = MAX_BODY_BYTES
    log_prompts: bool = False
    # a request may name any model of the model library: it is loaded once the API is idle
    allow_model_switch: bool = False

    def __post_init__(self) -> None:
        if self.host not in LOOPBACK and not self.api_key:
            raise BadInputError(
                f"listening on {self.host} exposes the model to the network: set an API key "
                "(--api-key) or use 127.0.0.1"
            )
        if not 0 <= self.port <= 65535:
            raise BadInputError(f"port must be 0-65535, not {self.port}")
        if self.n_slots < 1:
            raise BadInputError("the server needs at least one slot")


@dataclass(frozen=True)
class ServerState:
    """What the status bar shows: off, or listening on an address with N clients."""

    address: str | None = None
    active: int = 0
    waiting: int = 0
    error: str | None = None

    @property
    def listening(self) -> bool:
        return self.address is not None


@dataclass
class _Counters:
    active: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class ApiServer:
    """Start it (blocks until listening, or raises ServerStartError), stop it."""

    def __init__(
        self,
        worker: EngineWorker,
        config: ServerConfig,
        on_state: Callable[[ServerState], None] | None = None,
    ) -> None:
        self.worker = worker
        self.config = config
        self._on_state = on_state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._counters = _Counters()
        self.address: str | None = None
        worker.api.configure(PoolShape(config.n_slots, config.n_ctx_per_slot))

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
        self._outbox = _Outbox(asyncio.get_running_loop())
        logging.getLogger("aiohttp.server").addFilter(_MALFORMED_REQUESTS)  # once: a set
        app = web.Application(
            client_max_size=self.config.max_body_bytes,
            middlewares=[self._errors, self._cors, self._auth],
        )
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/models/{id:.+}", self._model)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
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

    # --- middleware ---

    @web.middleware
    async def _errors(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except ApiError as exc:
            status = exc.status
            return web.json_response(exc.body(), status=exc.status)
        except web.HTTPRequestEntityTooLarge:
            status = 413
            limit = self.config.max_body_bytes // 2**20
            error = ApiError(413, f"the request body is larger than {limit} MB", code="too_large")
            return web.json_response(error.body(), status=413)
        except web.HTTPException as exc:
            status = exc.status
            error = _routing_error(request, exc)
            headers = {k: v for k, v in exc.headers.items() if k.lower() != "content-type"}
            return web.json_response(error.body(), status=exc.status, headers=headers)
        except asyncio.CancelledError:
            status = 499  # the client went away
            raise
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            return web.json_response(server_error("internal server error").body(), status=500)
        finally:
            tokens = request.get(USAGE_WORDS, "")
            log.info(
                "%s %s %d %s%.2f s", request.method, request.path, status,
                f"{tokens} " if tokens else "", time.perf_counter() - started,
            )  # fmt: skip

    @web.middleware
    async def _cors(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        allowed = origin is not None and (
            origin in self.config.cors_origins or "*" in self.config.cors_origins
        )
        if request.method == "OPTIONS" and allowed:
            response: web.StreamResponse = web.Response(status=204)
        else:
            response = await handler(request)
        if allowed and not response.prepared:
            response.headers["Access-Control-Allow-Origin"] = origin or "*"
            response.headers["Access-Control-Allow-Headers"] = "Authorization, Content-Type"
            response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
        return response

    @web.middleware
    async def _auth(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        key = self.config.api_key
        guarded = bool(key) and request.path != "/health"
        if guarded and not hmac.compare_digest(_bearer_token(request), (key or "").encode()):
            raise ApiError(
                401, "invalid API key: send it as 'Authorization: Bearer KEY'",
                "invalid_request_error", "invalid_api_key",
            )  # fmt: skip
        return await handler(request)

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
        loaded = f"; the loaded model is {model.id!r}" if model else "; no model is loaded"
        raise not_found(f"the model {wanted!r} is not loaded{loaded}")

    def _slot_context(self, model: ServedModel) -> int:
        """The tokens one request may use: the slot's context, within the trained one."""
        wanted = self.config.n_ctx_per_slot
        return min(wanted, model.context_length) if model.context_length else wanted

    async def _switchable(self, wanted: str) -> ModelEntry | None:
        """The library model a request names, when the user allows switching models."""
        if not self.config.allow_model_switch:
            return None
        name = wanted.strip().lower()
        for entry in await _library():
            if name in (model_id(str(entry.path)).lower(), entry.name.lower()):
                return entry
        return None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_chat)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_completion)

    async def _generate(
        self, request: web.Request, parse: Callable[[Any], ApiCall]
    ) -> web.StreamResponse:
        body = await _json_body(request)
        call = parse(body)
        model = self.worker.api.model
        switch_to = None
        # with switching allowed, any library model may be named, the loaded one included:
        # another request's switch may unload it before this one starts
        entry = await self._switchable(call.model)
        if entry is None and model is None:
            raise ApiError(503, "no model is loaded", "server_error", "model_not_loaded")
        if entry is None and model is not None and not model.answers_to(call.model):
            if self.config.allow_model_switch:  # several models to choose from: none matched
                raise not_found(
                    f"the model {call.model!r} is not loaded; the loaded model is {model.id!r}",
                    param="model",
                )
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
            queue: asyncio.Queue[ApiEvent] = asyncio.Queue()
            outbox = self._outbox
            job = ApiJob(call, lambda event: outbox.put(queue, event), switch_to=switch_to)
            served_as = model_id(switch_to[0]) if switch_to else model.id if model else call.model
            reply = ReplyBuilder(
                call.endpoint, served_as, call.include_usage, call.top_logprobs is not None
            )
            # rendered and tokenised here, beside the engine's steps, not between them
            await asyncio.get_running_loop().run_in_executor(None, self.worker.api.prepare, job)
            self.worker.serve_api(job)
            try:
                if call.stream:
                    return await _stream(request, queue, reply)
                return await _whole(request, queue, reply)
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


class _Outbox:
    """Events from the worker's thread into the requests' queues on the server's loop.

    The worker sends one event per stream per step; waking the loop for each
    (a write to its self-pipe) would cost sixteen system calls a step with
    sixteen clients. Events gather here and the first of a batch schedules one
    flush, which hands them all over."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Queue[ApiEvent], ApiEvent]] = []

    def put(self, queue: asyncio.Queue[ApiEvent], event: ApiEvent) -> None:
        with self._lock:
            self._pending.append((queue, event))
            if len(self._pending) > 1:
                return  # a flush is already on its way
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting any more
            self._loop.call_soon_threadsafe(self._flush)

    def _flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for queue, event in pending:
            queue.put_nowait(event)


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


def _bearer_token(request: web.Request) -> bytes:
    """The key in `Authorization: Bearer KEY`; the scheme is case-insensitive (RFC 7235), and
    a bare key is taken as it always was."""
    header = request.headers.get("Authorization", "").strip()
    scheme, _, token = header.partition(" ")
    given = token.strip() if scheme.lower() == "bearer" else header
    try:
        return given.encode("utf-8")
    except UnicodeEncodeError as exc:  # aiohttp keeps bytes that are not UTF-8 as surrogates
        raise bad_request(
            "the Authorization header is not UTF-8 text", "Authorization", "invalid_header"
        ) from exc


def _routing_error(request: web.Request, exc: web.HTTPException) -> ApiError:
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        message = f"{request.method} is not allowed on {request.path}; use {allowed}"
        return ApiError(exc.status, message, code="method_not_allowed")
    if isinstance(exc, web.HTTPNotFound):
        message = (
            f"no such endpoint: {request.method} {request.path} (served: /v1/chat/completions, "
            "/v1/completions, /v1/models, /health)"
        )
        return ApiError(exc.status, message, code="not_found")
    return ApiError(exc.status, exc.reason, code=None)


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
    if at_least + 1 >= room:
        raise context_exceeded(room, f"at least {at_least}", call.endpoint)


async def _whole(
    request: web.Request, queue: asyncio.Queue[ApiEvent], reply: ReplyBuilder
) -> web.Response:
    while True:
        event = await queue.get()
        if isinstance(event, ApiDelta):
            reply.take(event)
        elif isinstance(event, ApiFailed):
            raise event.error
        else:
            request[USAGE_WORDS] = _usage_words(event)
            return web.json_response(reply.whole(event))


async def _stream(
    request: web.Request, queue: asyncio.Queue[ApiEvent], reply: ReplyBuilder
) -> web.StreamResponse:
    """The reply as server-sent events. Events that wait in the queue together (the loop
    fell behind the engine) go out in one write: one system call, not one per chunk."""
    first = await queue.get()  # an error before the first token is still a plain error
    if isinstance(first, ApiFailed):
        raise first.error
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    opening = reply.first_chunk()
    chunks: list[bytes] = [_event(opening)] if opening is not None else []
    event: ApiEvent = first
    while True:
        if isinstance(event, ApiDelta):
            chunks.append(_event(reply.delta_chunk(event)))
        elif isinstance(event, ApiFailed):
            await response.write(b"".join([*chunks, _event(event.error.body())]))
            return response
        else:
            request[USAGE_WORDS] = _usage_words(event)
            if event.tool_calls:
                chunks.append(_event(reply.tool_calls_chunk(event.tool_calls)))
            chunks.append(_event(reply.final_chunk(event)))
            if reply.include_usage:
                chunks.append(_event(reply.usage_chunk(event)))
            await response.write(b"".join([*chunks, b"data: [DONE]\n\n"]))
            await response.write_eof()
            return response
        if queue.empty():
            await response.write(b"".join(chunks))
            chunks = []
            event = await queue.get()
        else:
            event = queue.get_nowait()


def _event(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


def _usage_words(finished: ApiFinished) -> str:
    usage = finished.usage
    return (
        f"prompt {usage.prompt_tokens} ({usage.cached_tokens} cached) "
        f"completion {usage.completion_tokens} tokens,"
    )


async def _library() -> list[ModelEntry]:
    """The model library's language models whose files exist (SQLite: off the loop)."""

    def read() -> list[ModelEntry]:
        with ModelLibrary() as library:
            return [e for e in library.models() if e.exists]

    return await asyncio.get_running_loop().run_in_executor(None, read)


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
