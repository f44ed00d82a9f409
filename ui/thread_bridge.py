"""Work off the GUI thread, answers on it: the one bridge between other threads and widgets.

Qt widgets may only be touched from the GUI thread, and a file read, a Hub
query, a decode or a server's start must not run there. A `GuiRelay` takes a
callback and its argument from any thread and calls it on the thread the relay
lives on (the GUI's), through a queued signal: Qt queues an emission that
crosses threads, and a queued emission is an event, so it is seen even when it
was posted before the receiving loop started. `Background` adds worker threads:
`run` hands a call's result (or its exception) to a callback on the GUI thread;
`in_daemon_thread` does the same from a daemon thread of its own, for work that
must never hold up the process's exit (a server that does not stop). Once a
relay is closed, late answers are dropped rather than delivered to widgets
that are going away (or to a page that has started over).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from PySide6.QtCore import QObject, Qt, Signal

log = logging.getLogger(__name__)
T = TypeVar("T")
Then = Callable[[T], None]
Failed = Callable[[BaseException], None]


class GuiRelay(QObject):
    """Calls posted from any thread, made on the thread this object lives on."""

    _call = Signal(object, object)  # the callback, its argument; emitted from any thread

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.closed = False
        self._call.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def post(self, callback: Callable[[Any], None], value: object = None) -> None:
        """From any thread: `callback(value)` on the relay's thread, unless it is closed first."""
        if self.closed:
            return
        with contextlib.suppress(RuntimeError):  # the owner was deleted meanwhile
            self._call.emit(callback, value)

    def close(self) -> None:
        """Deliver nothing more, not even what is already on its way."""
        self.closed = True

    def in_daemon_thread(
        self, name: str, call: Callable[[], T], then: Then[T], failed: Failed | None = None
    ) -> threading.Thread:
        """Run `call` on a daemon thread of its own; `then(result)` or `failed(exception)`
        on the relay's thread."""

        def run() -> None:
            try:
                result = call()
            except Exception as exc:
                self._fail(failed, exc)
                return
            self.post(then, result)

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread

    def _fail(self, failed: Failed | None, error: BaseException) -> None:
        if failed is not None:
            self.post(failed, error)
        else:
            log.error("a call off the GUI thread failed", exc_info=error)

    def _deliver(self, callback: Callable[[Any], None], value: object) -> None:
        if not self.closed:
            callback(value)


class Background(GuiRelay):
    """A small pool of worker threads whose answers arrive on the GUI thread."""

    def __init__(self, name: str, workers: int = 1, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)

    def run(self, call: Callable[[], T], then: Then[T], failed: Failed | None = None) -> Future[T]:
        """Run `call` on a worker; `then(result)` on the GUI thread, or `failed(exception)`
        (logged when there is no `failed`)."""
        future = self._pool.submit(call)
        future.add_done_callback(partial(self._finished, then, failed))
        return future

    def shutdown(self) -> None:
        """Cancel what has not started, and deliver nothing more."""
        self.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _finished(self, then: Then[T], failed: Failed | None, future: Future[T]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            self.post(then, future.result())
        else:
            self._fail(failed, error)
