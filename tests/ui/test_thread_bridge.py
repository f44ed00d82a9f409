"""ui.thread_bridge: calls run off the GUI thread, and their answers come back on it."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import QCoreApplication

from ui.thread_bridge import Background, GuiRelay


@pytest.fixture
def background(qtbot):
    calls = Background("bridge-test")
    yield calls
    calls.shutdown()


def test_a_call_runs_on_a_worker_and_its_answer_on_the_gui_thread(qtbot, background) -> None:
    gui = threading.current_thread()
    ran_on: list[threading.Thread] = []
    answers: list[tuple[int, threading.Thread]] = []

    def work() -> int:
        ran_on.append(threading.current_thread())
        return 42

    background.run(work, lambda value: answers.append((value, threading.current_thread())))
    qtbot.waitUntil(lambda: bool(answers), timeout=5000)
    assert ran_on[0] is not gui and ran_on[0].name.startswith("bridge-test")
    assert answers == [(42, gui)]


def test_a_failure_reaches_its_handler_on_the_gui_thread(qtbot, background) -> None:
    errors: list[tuple[BaseException, threading.Thread]] = []

    def work() -> int:
        raise ValueError("unreadable")

    background.run(
        work, lambda _v: None, lambda exc: errors.append((exc, threading.current_thread()))
    )
    qtbot.waitUntil(lambda: bool(errors), timeout=5000)
    assert isinstance(errors[0][0], ValueError) and errors[0][1] is threading.current_thread()


def test_a_value_posted_from_a_foreign_thread_arrives_on_the_gui_thread(qtbot, background) -> None:
    seen: list[tuple[str, threading.Thread]] = []
    thread = threading.Thread(
        target=background.post, args=(lambda v: seen.append((v, threading.current_thread())), "hi")
    )
    thread.start()
    thread.join()
    qtbot.waitUntil(lambda: bool(seen), timeout=5000)
    assert seen == [("hi", threading.current_thread())]


def test_nothing_is_delivered_after_shutdown(qtbot, background) -> None:
    answers: list[int] = []
    background.post(answers.append, 1)  # queued before the owner shuts down
    background.shutdown()
    background.post(answers.append, 2)
    QCoreApplication.processEvents()  # a queued delivery would run now
    assert answers == []


def test_a_daemon_threads_answer_or_failure_arrives_on_the_gui_thread(qtbot) -> None:
    relay = GuiRelay()
    answers: list[tuple[object, threading.Thread]] = []

    def note(value: object) -> None:
        answers.append((value, threading.current_thread()))

    worked = relay.in_daemon_thread("bridge-daemon", lambda: "up", note)
    assert worked.daemon and worked.name == "bridge-daemon"

    def refuse() -> str:
        raise OSError("port taken")

    relay.in_daemon_thread("bridge-daemon", refuse, note, failed=note)
    qtbot.waitUntil(lambda: len(answers) == 2, timeout=5000)
    assert {str(value) for value, _thread in answers} == {"up", "port taken"}
    assert all(thread is threading.current_thread() for _value, thread in answers)
