"""Python's cyclic garbage collector, held off while the window starts.

Starting the window allocates some 85,000 objects that live as long as it does
(modules, classes, Qt's wrappers) and almost no cycles to free: with the collector
on, it ran about 200 times during a start and took 50-85 ms of the interpreter here,
which the window's imports and the model load's log lines (app.interpreter_sharing)
both wait for. So `shardchat gui` holds it off from its first line, and the window
lets it run again once shown, after moving everything that exists then out of its
reach (ui.desktop.freeze_long_lived_objects). What start-up left as cycles, about
1,300 objects here, is frozen with the rest. A first launch's wizard, which profiles
the machine for minutes, runs with the collector on.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_held_off() -> Iterator[None]:
    """No cyclic collection inside unless `collect_again` is called there; on leaving,
    the collector is as it was."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def collect_again() -> None:
    """End the hold: the window is shown, or what comes next runs too long to go without."""
    gc.enable()
