"""The window's engine with "Run models across these computers" on: the model is split onto
two lent computers (real RPC servers of this build on loopback) by a child engine process,
so a lent computer dying mid-reply ends that reply and that process, never the window."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import psutil
import pytest

from app.engine_host.child_engine import EXIT_TIMEOUT_S
from app.engine_host.engine_router import SPLIT_PLACEMENT, EngineRouter
from app.engine_host.events import (
    FINAL_EVENTS,
    EngineEvent,
    EngineLost,
    ModelLoaded,
    ReplyFinished,
    RequestFailed,
    TokenStreamed,
)
from app.model_lifecycle.load_planning import LoadRequest
from engine.generation.sampling import SamplingSettings
from tests.lent_computers import STORY, here_budget, kill_server, port

GREEDY = SamplingSettings(temperature=0.0, max_tokens=32)
TIMEOUT_S = 300


class Window:
    """The router as the window holds it, with its events in a queue."""

    def __init__(self) -> None:
        self.events: queue.Queue[EngineEvent] = queue.Queue()
        self.engine = EngineRouter(self.events.put).start()

    def next(self, accept: type) -> EngineEvent:
        while True:
            event = self.events.get(timeout=TIMEOUT_S)
            if isinstance(event, accept):
                return event

    def answer(self, request_id: int) -> EngineEvent:
        """The final event of a request (what came before it is passed over)."""
        while True:
            event = self.events.get(timeout=TIMEOUT_S)
            if event.request_id == request_id and isinstance(event, FINAL_EVENTS):
                return event

    def load(self, model: str) -> ModelLoaded:
        loaded = self.answer(self.engine.load_planned(LoadRequest(model, 4096, None)))
        assert isinstance(loaded, ModelLoaded), loaded
        return loaded

    def reply(self, text: str, settings: SamplingSettings = GREEDY) -> str:
        self.answer(self.engine.start_conversation())
        finished = self.answer(self.engine.send_message(text, settings))
        assert isinstance(finished, ReplyFinished), finished
        return finished.text


@pytest.fixture
def window() -> Iterator[Window]:
    made = Window()
    yield made
    made.engine.shutdown()


def child_engines() -> list[psutil.Process]:
    return [
        child for child in psutil.Process().children()
        if "app.engine_host.child_engine_process" in child.cmdline()
    ]  # fmt: skip


def no_child_engine_left() -> bool:
    """Every child engine has exited: a stopped one frees its model and goes on its own
    (ChildEngine.stop does not wait), killed after EXIT_TIMEOUT_S, so this waits for
    the exits themselves, a little longer than that."""
    _gone, alive = psutil.wait_procs(child_engines(), timeout=EXIT_TIMEOUT_S + 5)
    return not alive


def test_a_model_split_across_two_lent_computers_answers_as_this_machine_alone(
    window, two_lent, default_model_file
) -> None:
    window.engine.here_bytes = int(here_budget(default_model_file))
    window.engine.use_lent_computers(True)
    split = window.load(str(default_model_file)).split
    port_a, port_b = (port(address) for address in two_lent)
    assert split.startswith(
        f"split: blocks 0-9 here, 10-19 on 127.0.0.1:{port_a}, 20-29 on 127.0.0.1:{port_b}"
    )
    assert "weights on the lent computers as planned: 127.0.0.1:" in split
    assert len(child_engines()) == 1  # the model is the child's, not this process's
    across = window.reply(STORY)
    refused = window.answer(window.engine.set_budget(2**30))
    assert isinstance(refused, RequestFailed) and refused.message == SPLIT_PLACEMENT

    window.engine.use_lent_computers(False)
    assert window.load(str(default_model_file)).split == "" and no_child_engine_left()
    assert window.reply(STORY) == across != ""


def test_a_lent_computer_dying_mid_reply_ends_the_reply_and_the_next_load_runs_without_it(
    window, two_lent, default_model_file
) -> None:
    window.engine.here_bytes = int(here_budget(default_model_file))
    window.engine.use_lent_computers(True)
    window.load(str(default_model_file))
    window.answer(window.engine.start_conversation())
    replying = window.engine.send_message(STORY, SamplingSettings(temperature=0, max_tokens=800))
    assert isinstance(window.next(TokenStreamed), TokenStreamed)  # the reply has begun
    kill_server(two_lent[0])

    failed = window.answer(replying)
    assert isinstance(failed, RequestFailed)
    assert failed.message == f"the lent computer {two_lent[0]} stopped answering mid-reply"
    lost = window.next(EngineLost)
    assert isinstance(lost, EngineLost) and lost.gone == (two_lent[0],) and lost.reload
    assert lost.message.endswith("the conversation is kept, and the model reloads without it")
    assert no_child_engine_left()

    split = window.load(str(default_model_file)).split
    assert split.startswith(f"split: blocks 0-9 here, 10-29 on 127.0.0.1:{port(two_lent[1])}")
    assert window.reply("Say the word yes.") != ""
