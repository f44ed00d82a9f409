"""The on/off switch of a server the window runs, kept once for every panel that has one.

The Local API server and lending this computer (the Share panel) each start a server
that takes seconds to come up (a socket bound, a process answering a probe) and to go
down (streams ended, a process reaped). The GUI thread must never wait on either, so a
start and a stop run on a daemon thread of their own and answer through a relay. While
one is under way the switch takes no other click: a stop cannot overtake a start that
has not finished, and a second start would race the first for its port. An answer from
a server that is no longer the switch's (it was switched off, failed, or the app quit
meanwhile) is dropped. Why it is off is one line: a server's own reason (a taken port)
as it says it; any other exception is a bug, so the log keeps its traceback.

The switch holds the phase and the server; the controller says what its panel shows at
each step, in its own view's words, through the callbacks it hands over.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from enum import Enum
from typing import Any, Generic, Protocol, TypeVar

from PySide6.QtCore import QObject

from ui.thread_bridge import GuiRelay

log = logging.getLogger(__name__)

R = TypeVar("R")  # what a start answers: the address listened on, what is lent
R_co = TypeVar("R_co", covariant=True)
T = TypeVar("T")


class Server(Protocol[R_co]):
    """Both block for seconds: they run on the switch's thread, never on the GUI's."""

    def start(self) -> R_co: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=Server[Any])


class SwitchPhase(Enum):
    OFF = "off"
    STARTING = "starting"
    ON = "on"
    STOPPING = "stopping"


class ServerSwitch(Generic[S, R]):
    """Off → starting → on → stopping → off; a failed start, or a server that ends by
    itself, goes back to off saying why."""

    def __init__(
        self,
        owner: QObject,
        thread_name: str,
        name: str,
        *,
        make: Callable[[], S | None],
        starting: Callable[[], None],
        started: Callable[[S, R], None],
        failed: Callable[[str], None],
        stopping: Callable[[], None],
        stopped: Callable[[], None],
        again: Callable[[], None],
        says_why: type[Exception],
        other_errors: str = "",
    ) -> None:
        """`name` is the log's ("the API server did not start"). `make` gives the server
        the settings describe, or None where it refused them (it showed why itself).
        `again` shows the phase once more, for a click that was not taken. `says_why`:
        the exceptions whose message is the panel's line as it is; any other's follows
        `other_errors` ("the server did not start: ")."""
        self.thread_name, self.name = thread_name, name
        self._make, self._starting, self._started = make, starting, started
        self._failed, self._stopping, self._stopped, self._again = failed, stopping, stopped, again
        self._says_why, self._other_errors = says_why, other_errors
        self.phase = SwitchPhase.OFF
        self._server: S | None = None  # running, or on its way up (not down: that one is let go)
        self._job: threading.Thread | None = None  # the start or stop under way
        self._relay = GuiRelay(owner)  # the answers end here, on the GUI thread

    def switch(self, on: bool) -> None:
        """A click on the way up or down is not taken: the panel shows the phase again."""
        if on and self.phase is SwitchPhase.OFF:
            self._start()
        elif not on and self.phase is SwitchPhase.ON:
            self._stop()
        else:
            self._again()

    def watch(
        self, thread_name: str, server: S, wait: Callable[[], T], why: Callable[[T], str]
    ) -> None:
        """Off, saying `why(what wait returned)`, once `server` ends by itself (`wait` returns);
        not when it was switched off or the app quit first."""
        self._relay.in_daemon_thread(
            thread_name, wait, lambda result: self._ended(server, lambda: why(result))
        )

    def shutdown(self, wait_s: float) -> None:
        """At quit, the one wait on the GUI thread (about twice `wait_s` at most): the start
        or stop under way ends first, as a server that does not listen yet cannot be told to
        stop; then the server stops, so nothing serves on after the app. The panel is not
        told: the window is closing."""
        self._relay.close()
        if self._job is not None:
            self._job.join(wait_s)
        server, self._server = self._server, None
        if server is not None:
            stopping = threading.Thread(
                target=self._stop_at_quit, args=(server,), name=self.thread_name, daemon=True
            )  # a daemon: the process's exit never waits on a stop that hangs
            stopping.start()
            stopping.join(wait_s)

    # --- the person's switch ---

    def _start(self) -> None:
        server = self._make()
        if server is None:
            return
        self._server = server
        self.phase = SwitchPhase.STARTING
        self._starting()
        self._job = self._relay.in_daemon_thread(
            self.thread_name,
            server.start,
            lambda result: self._on_started(server, result),
            lambda error: self._on_start_failed(server, error),
        )

    def _stop(self) -> None:
        server, self._server = self._server, None
        self.phase = SwitchPhase.STOPPING
        self._stopping()
        if server is None:
            self._on_stopped()
            return
        self._job = self._relay.in_daemon_thread(
            self.thread_name, server.stop, lambda _none: self._on_stopped(), self._on_stop_failed
        )

    # --- answers, on the GUI thread ---

    def _on_started(self, server: S, result: R) -> None:
        if server is self._server and self.phase is SwitchPhase.STARTING:
            self.phase = SwitchPhase.ON
            self._started(server, result)

    def _on_start_failed(self, server: S, error: BaseException) -> None:
        message = str(error)
        if not isinstance(error, self._says_why):
            log.error("%s did not start", self.name, exc_info=error)
            message = f"{self._other_errors}{error}"
        self._ended(server, lambda: message)

    def _on_stop_failed(self, error: BaseException) -> None:
        """Off all the same: the server was let go, and the log keeps why its stop failed."""
        log.error("%s's stop failed", self.name, exc_info=error)
        self._on_stopped()

    def _on_stopped(self) -> None:
        self.phase = SwitchPhase.OFF
        self._stopped()

    def _ended(self, server: S, why: Callable[[], str]) -> None:
        if server is self._server:  # not switched off (or quit) meanwhile
            self._server = None
            self.phase = SwitchPhase.OFF
            self._failed(why())

    def _stop_at_quit(self, server: S) -> None:
        try:
            server.stop()
        except Exception:
            log.exception("%s's stop failed", self.name)
