"""Work off the GUI thread, answers on it: the one bridge between worker threads and widgets.

Qt widgets may only be touched from the GUI thread, and a file read, a Hub
query or a decode must not run there. `Background` runs a call on its own
worker threads and hands the result (or the exception) to a callback on the
GUI thread, through a queued signal: Qt queues an emission that crosses
threads, so the callback runs in the GUI thread's event loop. `post` does the
same for a value produced on a thread the page did not start (a server, a
profiling job). Once the owner is shut down, late answers are dropped rather
than delivered to widgets that are going away.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from PySide6.QtCore import QObject, Qt, Signal

log = logging.getLogger(__name__)
T = TypeVar("T")


class Background(QObject):
    """A small pool of worker threads whose answers arrive on the GUI thread."""

    _answer = Signal(object, object)  # the callback, its argument; emitted from any thread

    def __init__(self, name: str, workers: int = 1, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._closed = False
        self._answer.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def run(
        self,
        call: Callable[[], T],
        then: Callable[[T], None],
        failed: Callable[[BaseException], None] | None = None,
    ) -> Future[T]:
        """Run `call` on a worker; `then(result)` on the GUI thread, or `failed(exception)`
        (logged when there is no `failed`)."""
        future = self._pool.submit(call)
        future.add_done_callback(partial(self._finished, then, failed))
        return future

    def post(self, callback: Callable[[Any], None], value: object = None) -> None:
        """From any thread: `callback(value)` on the GUI thread."""
        if self._closed:
            return
        with contextlib.suppress(RuntimeError):  # the owner was deleted meanwhile
            self._answer.emit(callback, value)

    def shutdown(self) -> None:
        """Cancel what has not started, and deliver nothing more."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _finished(
        self,
        then: Callable[[T], None],
        failed: Callable[[BaseException], None] | None,
        future: Future[T],
    ) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            self.post(then, future.result())
        elif failed is not None:
            self.post(failed, error)
        else:
            log.error("background call failed", exc_info=error)

    def _deliver(self, callback: Callable[[Any], None], value: object) -> None:
        if not self._closed:
            callback(value)
