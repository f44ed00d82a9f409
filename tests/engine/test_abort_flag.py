"""A step's abort check is native code reading a flag that a cancel raises: llama.cpp
calls it after every graph node without taking Python's GIL (engine.llama.abort_flag)."""

from __future__ import annotations

import ctypes
import sys
import threading

from engine.cancel import CancelToken
from engine.llama.abort_flag import AbortFlag


def check(flag: AbortFlag) -> bool:
    """The flag's callback called as llama.cpp calls it: through its C function pointer."""
    return bool(flag.callback(flag.data))


def test_the_native_check_answers_false_until_the_flag_is_raised_then_true() -> None:
    flag = AbortFlag()
    assert not check(flag) and not flag.raised
    flag.raise_flag()
    assert check(flag) and flag.raised
    assert not check(AbortFlag())  # each step's flag is its own


def test_the_check_is_the_c_librarys_strlen_not_a_python_callback() -> None:
    library = ctypes.cdll.msvcrt if sys.platform == "win32" else ctypes.CDLL(None)
    address = ctypes.cast(AbortFlag().callback, ctypes.c_void_p).value
    assert address == ctypes.cast(library.strlen, ctypes.c_void_p).value


def test_a_watched_token_raises_the_flag_on_the_cancelling_thread() -> None:
    token, flag = CancelToken(), AbortFlag()
    raised_on: list[str] = []

    def on_cancel() -> None:
        raised_on.append(threading.current_thread().name)
        flag.raise_flag()

    with token.watching(on_cancel):
        assert not check(flag)
        canceller = threading.Thread(target=token.cancel, name="canceller")
        canceller.start()
        canceller.join()
        assert check(flag) and token.cancelled
    assert raised_on == ["canceller"]


def test_a_token_already_cancelled_raises_the_flag_at_once() -> None:
    token, flag = CancelToken(), AbortFlag()
    token.cancel()
    with token.watching(flag.raise_flag):
        assert check(flag)


def test_a_token_cancelled_after_the_step_leaves_its_flag_alone() -> None:
    token, flag, other = CancelToken(), AbortFlag(), AbortFlag()
    with token.watching(flag.raise_flag), token.watching(other.raise_flag):
        pass
    token.cancel()
    assert token.cancelled and not check(flag) and not check(other)
