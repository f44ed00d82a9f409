"""`shardchat serve`: the OpenAI-compatible server without the window.

Loads the model on the engine worker (under the planner when this machine
has a profile, as the window does), starts the server and serves until
Ctrl-C or SIGTERM (then exit 0; a second one exits at once, 130, without
freeing the model under the worker). The address goes to stdout once it
listens, so a script can wait for it; a taken port or a bad address is one
line and exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import queue
import sys
from collections.abc import Iterator
from pathlib import Path

from app.api.server import ApiServer
from app.api.server_config import ServerConfig
from app.engine_host.events import EngineEvent, ModelLoaded, RequestFailed
from app.engine_host.worker import EngineWorker
from app.model_lifecycle.load_planning import ContextShape, LoadRequest, stored_profile
from app.stop_signals import EXIT_INTERRUPTED, POLL_S, StopSignals, exit_now, run_on_thread
from engine.errors import BadInputError
from engine.model.default_model import default_model_path
from engine.runtime.loaded_model import inspect_model

log = logging.getLogger(__name__)

STOPPING = "stopping: requests in flight end now… (again to stop at once)"


def run_serve(args: argparse.Namespace) -> int:
    config = ServerConfig(
        host=args.host, port=args.port, api_key=args.api_key or None,
        cors_origins=tuple(args.cors_origin), n_slots=args.parallel,
        n_ctx_per_slot=args.ctx_per_slot, max_queue=max(args.max_queue, 0),
        log_prompts=args.log_prompts, allow_model_switch=args.allow_model_switch,
    )  # fmt: skip
    model_path = inspect_model(args.model or default_model_path()).path
    mmproj = _projector(args.mmproj)
    profile = stored_profile()
    if args.vram is not None and profile is None:
        raise BadInputError("--vram needs this machine's profile: run `shardchat profile` first")
    # planned as the window plans: with this machine's profile when it has one (the budget:
    # --vram, else what other programs leave free), else on the CPU
    # each client's sequence a KV stream of --ctx-per-slot cells (ContextShape.for_server)
    shape = ContextShape.for_server(args.parallel, args.ctx_per_slot)
    request = LoadRequest(
        str(model_path), args.ctx_per_slot, profile, args.vram, mmproj,
        prompt_format=args.prompt_format, n_threads=args.threads, shape=shape,
    )  # fmt: skip
    events: queue.Queue[EngineEvent] = queue.Queue()
    worker = EngineWorker(events.put).start()
    with _requests_shown(), StopSignals(STOPPING, "stopped at once") as stop:
        server: list[ApiServer] = []
        try:
            _serve(worker, events, request, config, stop, server)
            stop.wait()
        finally:  # on a thread, so that a second signal is handled at once meanwhile
            run_on_thread(lambda: _shut_down(server, worker), name="shardchat-stop")
        if worker.is_running:  # still inside llama.cpp: exiting normally would free its model
            print("shardchat: the engine did not stop in time; exiting at once", file=sys.stderr)
            exit_now(EXIT_INTERRUPTED)
    return 0


def _shut_down(server: list[ApiServer], worker: EngineWorker) -> None:
    for started in server:
        started.stop()
    worker.shutdown()


def _serve(
    worker: EngineWorker,
    events: queue.Queue[EngineEvent],
    request: LoadRequest,
    config: ServerConfig,
    stop: StopSignals,
    started: list[ApiServer],
) -> None:
    """Load and listen, the server put in `started` (a stop asked for during the load ends
    the command once the load is done; a second one exits at once)."""
    loaded = _wait_for(events, worker.load_planned(request))
    if stop.requested:
        return
    if isinstance(loaded, ModelLoaded) and loaded.vision_problem:
        print(f"shardchat: no images: {loaded.vision_problem}", file=sys.stderr)
    server = ApiServer(worker, config)
    address = server.start()
    started.append(server)
    served = worker.api.model
    print(f"listening on {address} (model {served.id if served else '?'})", flush=True)


@contextlib.contextmanager
def _requests_shown() -> Iterator[None]:
    """The request log (one line per request, never the prompt) on stderr as well as in the
    log file, as a server's terminal shows it, while this serve runs: a serve run in-process
    (the tests') must not leave its handler on a stderr that is closed after it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    handler.setLevel(logging.INFO)
    logger = logging.getLogger("shardchat.api")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def _projector(path: str | None) -> str | None:
    if path is None:
        return None
    if not Path(path).is_file():
        raise BadInputError(f"{path}: no such projector file")
    return path


def _wait_for(events: queue.Queue[EngineEvent], request_id: int) -> EngineEvent:
    while True:
        try:  # in short waits, so that Ctrl-C or SIGTERM is heard during a long load
            event = events.get(timeout=POLL_S)
        except queue.Empty:
            continue
        if getattr(event, "request_id", None) != request_id:
            continue
        if isinstance(event, RequestFailed):
            if event.bad_input:
                raise BadInputError(event.message)
            raise RuntimeError(event.message)
        return event
