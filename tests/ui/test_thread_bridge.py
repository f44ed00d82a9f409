"""ui.thread_bridge: calls run off the GUI thread, and their answers come back on it."""

from __future__ import annotations

import threading

import pytest
import shiboken6
from PySide6.QtCore import QCoreApplication, QObject

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


def _flood(
    relay: Background, delivered: list[int], posting: threading.Event, stop: threading.Event
) -> None:
    posting.set()
    while not stop.is_set():
        relay.post(delivered.append, 1)


def test_answers_racing_their_owners_deletion_are_dropped_without_a_crash(qtbot) -> None:
    """A pool thread's answer once reached a relay while the GUI thread deleted its owner,
    and the process died in the emission: posts racing the deletion must do nothing."""
    for _round in range(30):
        owner = QObject()
        relay = Background("bridge-race", owner=owner)
        delivered: list[int] = []
        posting, stop = threading.Event(), threading.Event()

        thread = threading.Thread(target=_flood, args=(relay, delivered, posting, stop))
        thread.start()
        posting.wait()
        shiboken6.delete(owner)  # on the GUI thread, while the other thread posts
        stop.set()
        thread.join()
        QCoreApplication.processEvents()  # every queued answer arrives now, or is dropped
        assert relay.closed and delivered == []


def test_an_owners_deletion_cancels_the_work_not_yet_started(qtbot) -> None:
    owner = QObject()
    calls = Background("bridge-owner", owner=owner)
    started, release = threading.Event(), threading.Event()

    def first() -> None:
        started.set()
        release.wait(5)

    running = calls.run(first, lambda _v: None)
    waiting = calls.run(lambda: None, lambda _v: None)
    started.wait(5)
    shiboken6.delete(owner)
    release.set()
    running.result(timeout=5)
    assert waiting.cancelled()
