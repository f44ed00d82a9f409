"""A cancel flag that crosses threads.

The GUI or CLI thread sets it; the engine worker's generation loop and
llama.cpp's abort callback read it. It lives apart from the generation code so
that callers can hold one without importing llama.cpp.
"""

from __future__ import annotations

import threading


class CancelToken:
    """A thread-safe flag another thread sets to stop the current generation."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()
