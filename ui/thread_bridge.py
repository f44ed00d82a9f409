"""Work off the GUI thread, answers on it: the one bridge between other threads and widgets.

Qt widgets may only be touched from the GUI thread, and a file read, a Hub
query, a decode or a server's start must not run there. A `GuiRelay` takes a
callback and its argument from any thread and calls it on the GUI thread,
through a queued signal: Qt queues an emission that crosses threads, and a
queued emission is an event, so it is seen even when it was posted before the
receiving loop started. `Background` adds worker threads: `run` hands a call's
result (or its exception) to a callback on the GUI thread; `in_daemon_thread`
does the same from a daemon thread of its own, for work that must never hold up
the process's exit (a server that does not stop).

Every answer travels through one courier, a QObject that lives as long as the
process. A relay is a plain object tied to the widget that owns it: emitting on
a QObject while the GUI thread deletes it crashes the process (a pool thread's
answer raced a page's deletion that way), so no thread ever emits on anything
that can be deleted. When the owner is destroyed, or the relay is closed, late
answers are dropped on arrival rather than delivered to widgets that are gone
(or to a page that has started over); the check runs on the GUI thread, where
the deletion happens, so the two cannot interleave.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from PySide6.QtCore import QCoreApplication, QObject, Qt, Signal

log = logging.getLogger(__name__)
T = TypeVar("T")
Then = Callable[[T], None]
Failed = Callable[[BaseException], None]


class _Courier(QObject):
    """Carries (relay, callback, value) to the GUI thread; never deleted while the process runs."""

    call = Signal(object, object, object)

    def __init__(self) -> None:
        super().__init__()
        self.call.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def _deliver(self, relay: GuiRelay, callback: Callable[[Any], None], value: object) -> None:
        if not relay.closed:
            callback(value)


_courier: _Courier | None = None
_courier_made = threading.Lock()


def _the_courier() -> _Courier:
    """The process's courier, made on first use and moved to the application's thread."""
    global _courier
    with _courier_made:
        if _courier is None:
            _courier = _Courier()
            app = QCoreApplication.instance()
            if app is not None and _courier.thread() is not app.thread():
                _courier.moveToThread(app.thread())
        return _courier


class GuiRelay:
    """Calls posted from any thread, made on the GUI thread while the relay is open."""

    def __init__(self, owner: QObject | None = None) -> None:
        self.closed = False
        self._courier = _the_courier()
        if owner is not None:
            owner.destroyed.connect(self._owner_destroyed)

    def post(self, callback: Callable[[Any], None], value: object = None) -> None:
        """From any thread: `callback(value)` on the GUI thread, unless the relay closes first."""
        if not self.closed:
            self._courier.call.emit(self, callback, value)

    def close(self) -> None:
        """Deliver nothing more, not even what is already on its way."""
        self.closed = True

    def in_daemon_thread(
        self, name: str, call: Callable[[], T], then: Then[T], failed: Failed | None = None
    ) -> threading.Thread:
        """Run `call` on a daemon thread of its own; `then(result)` or `failed(exception)`
        on the GUI thread."""

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

    def _owner_destroyed(self, _owner: object = None) -> None:
        self.close()

    def _fail(self, failed: Failed | None, error: BaseException) -> None:
        if failed is not None:
            self.post(failed, error)
        else:
            log.error("a call off the GUI thread failed", exc_info=error)


class Background(GuiRelay):
    """A small pool of worker threads whose answers arrive on the GUI thread."""

    def __init__(self, name: str, workers: int = 1, owner: QObject | None = None) -> None:
        super().__init__(owner)
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

    def _owner_destroyed(self, _owner: object = None) -> None:
        self.shutdown()

    def _finished(self, then: Then[T], failed: Failed | None, future: Future[T]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            self.post(then, future.result())
        else:
            self._fail(failed, error)
