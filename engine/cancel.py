"""A cancel flag that crosses threads.

The GUI or CLI thread sets it; the engine worker's generation loop reads it between
steps, and a step in llama.cpp learns of it through a native flag the token raises
while it watches (engine.llama.abort_flag). It lives apart from the generation code
so that callers can hold one without importing llama.cpp.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class CancelToken:
    """A thread-safe flag another thread sets to stop the current generation."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()  # cancel against a watcher coming or going
        self._watchers: list[Callable[[], None]] = []

    def cancel(self) -> None:
        with self._lock:
            self._event.set()
            watchers = list(self._watchers)
        for on_cancel in watchers:
            on_cancel()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    @contextmanager
    def watching(self, on_cancel: Callable[[], None]) -> Iterator[None]:
        """Call `on_cancel`, on the cancelling thread, if the token is cancelled while the
        block runs; at once if it already is. It must be quick and must not block."""
        with self._lock:
            already = self._event.is_set()
            if not already:
                self._watchers.append(on_cancel)
        if already:
            on_cancel()
        try:
            yield
        finally:
            with self._lock:
                if on_cancel in self._watchers:
                    self._watchers.remove(on_cancel)
