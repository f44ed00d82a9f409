"""An engine worker in a child process, for a model split onto lent computers.

llama.cpp's RPC client aborts the process that uses a lent computer when that
computer dies mid-call (GGML_ABORT in ggml-rpc.cpp). So the window never loads such
a model itself: a fresh interpreter (`python -m app.engine_host.child_engine_process`) plans the
split, holds the ssh forwards, loads the model and runs a real EngineWorker, and
this side forwards requests to it and its events back, over a socket pair, as
pickles. When the child dies, every request it had not answered is handed to
`on_exit`, with why it died, so the window can end the reply and go on.
"""

from __future__ import annotations

import logging
import queue
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path

from app.engine_host.events import FINAL_EVENTS, EngineEvent, ModelLoaded, RequestFailed
from app.model_lifecycle.load_planning import LoadRequest
from engine.child_process import death_reason

log = logging.getLogger(__name__)

NO_IMAGES_WHEN_SPLIT = "a model split across lent computers does not see images yet"
ENDED = "the model's engine process has ended: the model loads again"
EXIT_TIMEOUT_S = 10.0  # for the child to free its model and close its forwards
_ERRORS_TAIL = 300


@dataclass(frozen=True)
class LentLoad:
    """The model to load across the lent computers that answer, less those left out."""

    load_id: int  # the request id its ModelLoaded (or RequestFailed) names
    request: LoadRequest
    left_out: frozenset[str] = frozenset()  # addresses that died under an earlier child
    here_bytes: int | None = None  # what this machine holds; None: free memory less a margin


@dataclass(frozen=True)
class ChildEnded:
    """The child is gone: the requests it never answered, and why it went."""

    unanswered: tuple[int, ...]
    reason: str  # "exited with code 0", "crashed (signal 6, SIGABRT)"
    last_error: str  # the last line it wrote on stderr (llama.cpp's abort), for the log
    using: tuple[str, ...]  # the lent computers (as stored) its split was planned over


class ChildEngine:
    """The parent's side: `submit_as` and `cancel` never wait on the child."""

    def __init__(
        self,
        load: LentLoad,
        on_event: Callable[[EngineEvent], None],
        on_exit: Callable[[ChildEngine, ChildEnded], None],
    ) -> None:
        self._on_event, self._on_exit = on_event, on_exit
        self.load = load
        self._unanswered: dict[int, None] = {load.load_id: None}  # ordered, as submitted
        self._ended = False  # its process is gone and on_exit was (or is being) told
        self._lock = threading.Lock()
        self.using: tuple[str, ...] = ()
        self.said = ""  # the split, and its prediction, in one line (app.lent.split)
        self.weights = ""  # where llama.cpp put the weights, against the split's account
        self._outbox: queue.Queue[tuple[object, ...] | None] = queue.Queue()
        ours, theirs = socket.socketpair()
        self._errors = tempfile.TemporaryFile(prefix="shardchat-engine-")  # noqa: SIM115 (read at its exit)
        with theirs:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "app.engine_host.child_engine_process",
                    str(theirs.fileno()),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._errors,
                cwd=Path(__file__).resolve().parents[1],
            )
        self._connection = Connection(ours.detach())
        self._outbox.put(("load", load))
        threading.Thread(target=self._send_loop, name="shardchat-child-out", daemon=True).start()
        threading.Thread(target=self._read_loop, name="shardchat-child-in", daemon=True).start()

    @property
    def pid(self) -> int:
        return self._process.pid

    def submit_as(self, request_id: int, request: object) -> None:
        with self._lock:
            ended = self._ended
            if not ended:
                self._unanswered[request_id] = None
        if ended:  # it died a moment ago: on_exit has its requests, not this one
            self._on_event(RequestFailed(request_id, ENDED, bad_input=False))
            return
        self._outbox.put(("submit", request_id, request))

    def cancel(self, request_id: int | None = None) -> None:
        self._outbox.put(("cancel", request_id))

    def stop(self) -> None:
        """Ask the child to free its model and go; it is killed if it has not within
        EXIT_TIMEOUT_S. Its unanswered requests still reach `on_exit`."""
        self._outbox.put(("stop",))
        self._outbox.put(None)
        threading.Thread(target=self._reap, name="shardchat-child-reap", daemon=True).start()

    def wait(self, timeout_s: float = EXIT_TIMEOUT_S) -> None:
        """Wait for a stopped child to go, killing it after `timeout_s` (the app quits)."""
        try:
            self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def _reap(self) -> None:
        self.wait()

    def _send_loop(self) -> None:
        """Sends in order, on its own thread: a request with images may fill the socket."""
        while (message := self._outbox.get()) is not None:
            try:
                self._connection.send(message)
            except OSError:
                return  # the child is gone; the reader says so

    def _read_loop(self) -> None:
        while True:
            try:
                message = self._connection.recv()
            except (EOFError, OSError):
                break
            if message[0] == "event":
                self._pass_on(message[1])
            elif message[0] == "split":
                self.using, self.said = message[1], message[2]
            elif message[0] == "weights":
                self.weights = message[1]
        self._outbox.put(None)
        self._process.wait()
        self._connection.close()
        with self._lock:
            self._ended = True
            unanswered = tuple(self._unanswered)
        reason = death_reason(self._process.returncode)
        self._on_exit(self, ChildEnded(unanswered, reason, self._last_error(), self.using))

    def _pass_on(self, event: EngineEvent) -> None:
        if isinstance(event, FINAL_EVENTS):
            with self._lock:
                self._unanswered.pop(event.request_id, None)
        if event.request_id == self.load.load_id:
            event = self._of_the_load(event)
        self._on_event(event)

    def _of_the_load(self, event: EngineEvent) -> EngineEvent:
        """The load's answer says the split; a refused one keeps no model (the window's
        was unloaded for the split), so it is not the user's mistake to undo."""
        if isinstance(event, RequestFailed):
            return replace(event, bad_input=False)
        if isinstance(event, ModelLoaded):
            said = " · ".join(line for line in (self.said, self.weights) if line)
            problem = NO_IMAGES_WHEN_SPLIT if self.load.request.mmproj_path else None
            return replace(event, split=said, vision_problem=problem or event.vision_problem)
        return event

    def _last_error(self) -> str:
        self._errors.seek(0)
        tail = self._errors.read().decode(errors="replace").strip()[-_ERRORS_TAIL:]
        self._errors.close()
        return tail.splitlines()[-1] if tail else ""
