"""An asyncio loop running on a thread of its own, as the API server runs its loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import TypeVar

Loop = TypeVar("Loop", bound=asyncio.AbstractEventLoop)


@contextlib.contextmanager
def running(loop: Loop) -> Iterator[Loop]:
    """`loop` runs on a new thread until the block ends; then it is stopped and closed."""
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
