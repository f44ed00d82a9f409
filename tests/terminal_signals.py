"""Signals as a terminal gives them to a command a test starts, whatever the test
runner's own disposition (a runner started in the background ignores SIGINT, and a
command started from it would then take no Ctrl-C: Python installs no
KeyboardInterrupt for an ignored SIGINT)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def ctrl_c_as_a_terminal_gives_it() -> Iterator[None]:
    """SIGINT neither ignored nor blocked while a command starts, as a shell starts it: an
    ignored disposition and the blocked mask survive exec (a handler does not), and Python
    then installs no KeyboardInterrupt, so a test process that ignored or blocked it would
    pass that on. Set here, not in preexec_fn, which is unsafe beside other threads."""
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        signal.signal(signal.SIGINT, handler)
