"""The child side of app.engine_host.child_engine: a real engine worker for a model split onto
lent computers, driven over the socket its parent passed down.

It plans the split over the lent computers that answer now (less those its parent
left out), keeps their ssh forwards open for as long as it runs, loads the model
and passes every event up. If a lent computer dies mid-call, llama.cpp aborts this
process, and only this process: the parent sees the socket close.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection

from app.engine_host.child_engine import LentLoad
from app.engine_host.engine_requests import LoadModel
from app.engine_host.events import EngineEvent, ModelLoaded, RequestFailed
from app.engine_host.worker import EngineWorker
from app.lent.computers import reached_computers
from app.lent.split import LentSplit, split_params
from app.logging_setup import configure_logging
from engine.errors import BadInputError, ShardChatError
from engine.llama.device_buffers import llama_log_lines, parse_buffer_lines
from engine.model.inventory import read_inventory
from engine.planning.machine_split import describe_held, held_shares

log = logging.getLogger(__name__)


@dataclass
class _WeightsCheck:
    """The split being loaded, and llama.cpp's log lines collected while it loads."""

    load_id: int
    chosen: LentSplit
    model_path: str
    lines: list[str]
    collecting: contextlib.ExitStack


class ChildSide:
    """Messages from the parent in, events to it out (from any thread, one at a time)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._sending = threading.Lock()
        self._checking: _WeightsCheck | None = None
        self.worker = EngineWorker(self.send_event, name="shardchat-child-engine").start()

    def send(self, message: tuple[object, ...]) -> None:
        with self._sending, contextlib.suppress(OSError):  # the parent gone: the loop ends
            self._connection.send(message)

    def send_event(self, event: EngineEvent) -> None:
        if self._checking is not None and event.request_id == self._checking.load_id:
            self._say_where_the_weights_are(event)
        self.send(("event", event))

    def load(self, held: contextlib.ExitStack, load: LentLoad) -> None:
        """Plan the split over what answers now, and queue its load under the parent's id."""
        try:
            reached = held.enter_context(reached_computers(log.info))
            using = [computer for computer in reached if computer.address not in load.left_out]
            chosen, params = split_params(load.request, using, load.here_bytes)
        except ShardChatError as exc:
            failed = RequestFailed(load.load_id, str(exc), isinstance(exc, BadInputError))
            self.send(("event", failed))
            return
        log.info("%s", chosen.said)
        self.send(("split", tuple(computer.address for computer in using), chosen.said))
        collecting = contextlib.ExitStack()
        lines = collecting.enter_context(llama_log_lines())
        self._checking = _WeightsCheck(
            load.load_id, chosen, load.request.model_path, lines, collecting
        )
        request = LoadModel(params, prompt_format=load.request.prompt_format)
        self.worker.submit_as(load.load_id, request)

    def _say_where_the_weights_are(self, event: EngineEvent) -> None:
        """llama.cpp's own buffer lines for each lent device, against the split's account
        (the log keeps the line; the parent gets it with the split)."""
        check, self._checking = self._checking, None
        assert check is not None
        check.collecting.close()
        if not isinstance(event, ModelLoaded):
            return
        inventory = read_inventory(check.model_path)
        held = held_shares(check.chosen.split, inventory, parse_buffer_lines(check.lines))
        if held:
            log.info("%s", describe_held(held))
            self.send(("weights", describe_held(held)))


def main(fd: int) -> int:
    configure_logging()
    connection = Connection(fd)
    side = ChildSide(connection)
    with contextlib.ExitStack() as held:  # the ssh forwards close after the model is freed
        while True:
            try:
                message = connection.recv()
            except (EOFError, OSError):
                break  # the parent is gone: free the model and go
            kind = message[0]
            if kind == "load":
                side.load(held, message[1])
            elif kind == "submit":
                side.worker.submit_as(message[1], message[2])
            elif kind == "cancel":
                side.worker.cancel(message[1])
            elif kind == "stop":
                break
        side.worker.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
