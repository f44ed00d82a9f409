"""Start-up work waited for with the Qt event loop running (ui.gui_main.wait_spinning)."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from PySide6.QtCore import QTimer

from engine.errors import BadInputError
from ui.gui_main import wait_spinning


def test_the_event_loop_runs_while_the_work_does(qapp) -> None:
    """The work finishes only once a Qt timer has fired: a blocking wait would time it out."""
    timer_fired = threading.Event()
    QTimer.singleShot(0, timer_fired.set)
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(timer_fired.wait, 10)
        assert wait_spinning(future) is True


def test_the_work_s_exception_reaches_the_caller(qapp) -> None:
    def refuse() -> None:
        raise BadInputError("no such model")

    with ThreadPoolExecutor(max_workers=1) as pool, pytest.raises(BadInputError, match="no such"):
        wait_spinning(pool.submit(refuse))


def test_work_already_done_is_returned_without_a_loop(qapp) -> None:
    done: Future[str] = Future()
    done.set_result("probed")
    assert wait_spinning(done) == "probed"
