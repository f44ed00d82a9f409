"""A measurement in a child process: its answer, its exception, its crash and its hang.

The functions sent to the child are library functions, importable in a fresh
interpreter (a test module is not): ctypes.string_at(0) reads address 0,
which crashes the child the way a faulting llama.cpp kernel would.
"""

from __future__ import annotations

import ctypes
import operator
import threading
import time

import pytest

from engine.cancel import CancelToken
from engine.child_process import Cancelled, run_in_child


def test_the_childs_return_value_comes_back() -> None:
    outcome = run_in_child(operator.mul, (21, 2), timeout_s=30)
    assert outcome.ok and outcome.value == 42


def test_an_exception_in_the_child_is_its_failure() -> None:
    outcome = run_in_child(int, ("Q9_9",), timeout_s=30)
    assert not outcome.ok
    assert outcome.failure.startswith("ValueError: invalid literal for int()")


def test_a_crashing_child_is_reported_not_fatal() -> None:
    outcome = run_in_child(ctypes.string_at, (0,), timeout_s=30)
    assert not outcome.ok
    assert outcome.failure.startswith("crashed (signal 11, SIGSEGV)")


def test_a_hanging_child_times_out_and_is_killed() -> None:
    started = time.monotonic()
    outcome = run_in_child(time.sleep, (60,), timeout_s=1.5)
    assert outcome.failure is not None and outcome.failure.startswith("timed out after")
    assert time.monotonic() - started < 10


def test_cancel_kills_the_child_at_once() -> None:
    cancel = CancelToken()
    threading.Timer(0.5, cancel.cancel).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        run_in_child(time.sleep, (60,), timeout_s=60, cancel=cancel)
    assert time.monotonic() - started < 5
