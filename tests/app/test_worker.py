"""The engine worker: one thread owns the model; requests in, events out; errors never kill it."""

from __future__ import annotations

import io
import queue
import threading
import time
from pathlib import Path

import pytest
from PIL import Image

from app.engine_host.events import (
    FINAL_EVENTS,
    ConversationStarted,
    EngineEvent,
    ModelLoaded,
    ModelUnloaded,
    ReplyFinished,
    RequestFailed,
    TokenStreamed,
)
from app.engine_host.worker import EngineWorker
from app.model_lifecycle.load_planning import LoadRequest
from engine.generation.sampling import GREEDY
from engine.generation.stats import FinishReason
from engine.llama.load_params import LoadParams
from engine.model.image_input import ImageFile
from tests.synthetic_vision import ProjectorSpec, write_synthetic_projector, write_synthetic_vlm

TIMEOUT_S = 60


class Recorder:
    """Collects events with the thread they arrived on; waits for a request's final event."""

    def __init__(self) -> None:
        self.events: queue.Queue[tuple[EngineEvent, str]] = queue.Queue()
        self.seen: list[tuple[EngineEvent, str]] = []

    def __call__(self, event: EngineEvent) -> None:
        self.events.put((event, threading.current_thread().name))

    def wait(self, request_id: int) -> EngineEvent:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            event, thread = self.events.get(timeout=max(deadline - time.monotonic(), 0.01))
            self.seen.append((event, thread))
            if isinstance(event, FINAL_EVENTS) and event.request_id == request_id:
                return event

    def of(self, request_id: int, kind: type) -> list:
        return [e for e, _ in self.seen if isinstance(e, kind) and e.request_id == request_id]


@pytest.fixture
def engine():
    recorder = Recorder()
    worker = EngineWorker(recorder).start()
    yield worker, recorder
    worker.shutdown()
    assert not worker.is_running


def params(path: Path, n_ctx: int = 1024) -> LoadParams:
    return LoadParams(str(path), n_ctx=n_ctx, n_threads=2)


def test_load_and_chat_streams_tokens_then_finishes(engine, default_model_file: Path) -> None:
    worker, recorder = engine
    loaded = recorder.wait(worker.load_model(params(default_model_file)))
    assert isinstance(loaded, ModelLoaded)
    assert loaded.architecture == "llama" and loaded.n_ctx == 1024
    # the name people read comes from the file; the GGUF's own stays at hand
    assert loaded.model_name == "SmolLM2 135M Instruct · Q4_1"
    assert loaded.general_name == "Smollm2 135M 8k Lc100K Mix1 Ep2"
    request = worker.send_message("Say hello", GREEDY.with_changes(max_tokens=16))
    done = recorder.wait(request)
    assert isinstance(done, ReplyFinished)
    tokens = recorder.of(request, TokenStreamed)
    assert tokens and "".join(t.text for t in tokens) == done.text
    assert done.stats.generated_tokens > 0
    assert {thread for _, thread in recorder.seen} == {"shardchat-engine"}


def test_bad_inputs_become_error_events_and_the_worker_stays_usable(
    engine, tmp_path: Path, default_model_file: Path
) -> None:
    worker, recorder = engine
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    for bad in (tmp_path / "missing.gguf", tmp_path, empty):
        failed = recorder.wait(worker.load_model(params(bad)))
        assert isinstance(failed, RequestFailed) and failed.bad_input
        assert "\n" not in failed.message
    no_model = recorder.wait(worker.send_message("hi", GREEDY))
    assert isinstance(no_model, RequestFailed) and "no model" in no_model.message
    assert isinstance(recorder.wait(worker.load_model(params(default_model_file))), ModelLoaded)
    reply = recorder.wait(worker.send_message("hi", GREEDY.with_changes(max_tokens=4)))
    assert isinstance(reply, ReplyFinished)


def test_a_bad_file_does_not_unload_the_current_model(engine, tmp_path: Path, default_model_file):
    worker, recorder = engine
    recorder.wait(worker.load_model(params(default_model_file)))
    bogus = tmp_path / "bogus.gguf"
    bogus.write_text("not a model")
    assert isinstance(recorder.wait(worker.load_model(params(bogus))), RequestFailed)
    reply = recorder.wait(worker.send_message("hi", GREEDY.with_changes(max_tokens=4)))
    assert isinstance(reply, ReplyFinished)


def test_unload_then_load_another_model_keeps_the_conversation(
    engine, default_model_file: Path, make_synthetic
) -> None:
    worker, recorder = engine
    recorder.wait(worker.load_model(params(default_model_file)))
    recorder.wait(worker.start_conversation("Be brief."))
    first = recorder.wait(worker.send_message("Hello", GREEDY.with_changes(max_tokens=8)))
    assert isinstance(first, ReplyFinished)
    unloaded = recorder.wait(worker.unload_model())
    assert isinstance(unloaded, ModelUnloaded) and unloaded.model_path == str(default_model_file)
    gone = recorder.wait(worker.send_message("still there?", GREEDY))
    assert isinstance(gone, RequestFailed)
    other = make_synthetic("qwen3moe", "F16")
    loaded = recorder.wait(worker.load_model(params(other, n_ctx=512)))
    assert isinstance(loaded, ModelLoaded) and loaded.architecture == "qwen3moe"
    second = recorder.wait(worker.send_message("Again", GREEDY.with_changes(max_tokens=4)))
    assert isinstance(second, ReplyFinished)
    # system + hello + reply are carried into the new model's prompt
    assert second.stats.prompt_tokens > first.stats.prompt_tokens


def test_start_conversation_forgets_the_previous_one(engine, default_model_file: Path) -> None:
    worker, recorder = engine
    recorder.wait(worker.load_model(params(default_model_file)))
    recorder.wait(worker.send_message("Hello", GREEDY.with_changes(max_tokens=8)))
    started = recorder.wait(worker.start_conversation("You are a pirate."))
    assert isinstance(started, ConversationStarted) and started.n_messages == 1


def test_cancel_stops_a_running_reply_within_100_ms(engine, default_model_file: Path) -> None:
    worker, recorder = engine
    recorder.wait(worker.load_model(params(default_model_file)))
    request = worker.send_message("Tell me a very long story.", GREEDY.with_changes(max_tokens=500))
    event, _ = recorder.events.get(timeout=TIMEOUT_S)
    assert isinstance(event, TokenStreamed)
    cancelled_at = time.perf_counter()
    worker.cancel(request)
    done = recorder.wait(request)
    assert time.perf_counter() - cancelled_at < 0.1
    assert isinstance(done, ReplyFinished)
    assert done.stats.finish_reason is FinishReason.CANCELLED


def test_a_failing_event_callback_does_not_kill_the_worker(default_model_file: Path) -> None:
    finals: queue.Queue[EngineEvent] = queue.Queue()

    def flaky(event: EngineEvent) -> None:
        if isinstance(event, TokenStreamed):
            raise RuntimeError("a slot blew up")
        finals.put(event)

    worker = EngineWorker(flaky).start()
    try:
        worker.load_model(params(default_model_file))
        assert isinstance(finals.get(timeout=TIMEOUT_S), ModelLoaded)
        worker.send_message("hi", GREEDY.with_changes(max_tokens=4))
        assert isinstance(finals.get(timeout=TIMEOUT_S), ReplyFinished)
    finally:
        worker.shutdown()


def test_a_vision_model_answers_about_images_and_a_bad_image_is_an_error_event(
    engine, tmp_path: Path
) -> None:
    worker, recorder = engine
    model_file, mmproj = write_synthetic_vlm(tmp_path / "vlm")
    request = LoadRequest(str(model_file), 1024, None, mmproj_path=str(mmproj))
    loaded = recorder.wait(worker.load_planned(request))
    assert isinstance(loaded, ModelLoaded) and loaded.vision_problem is None
    assert loaded.vision is not None and "vision encoder on the CPU" in loaded.vision
    image = ImageFile("red.png", png_bytes("red"))
    done = recorder.wait(worker.send_message("Colour?", GREEDY.with_changes(max_tokens=4), [image]))
    assert isinstance(done, ReplyFinished) and done.stats.prompt_tokens > 16
    broken = ImageFile("broken.png", b"\x89PNG\r\n\x1a\n broken")
    failed = recorder.wait(worker.send_message("And this?", GREEDY, [broken]))
    assert isinstance(failed, RequestFailed) and "broken.png" in failed.message
    again = recorder.wait(worker.send_message("Still there?", GREEDY.with_changes(max_tokens=4)))
    assert isinstance(again, ReplyFinished)  # the conversation (with its image) continues


def test_a_projector_for_another_model_leaves_a_working_text_model(engine, tmp_path: Path) -> None:
    worker, recorder = engine
    model_file, _ = write_synthetic_vlm(tmp_path / "vlm")
    other = write_synthetic_projector(tmp_path / "mmproj-wide.gguf", ProjectorSpec(96))
    request = LoadRequest(str(model_file), 1024, None, mmproj_path=str(other))
    loaded = recorder.wait(worker.load_planned(request))
    assert isinstance(loaded, ModelLoaded) and loaded.vision is None
    assert "made for another model" in loaded.vision_problem
    image = ImageFile("red.png", png_bytes("red"))
    refused = recorder.wait(worker.send_message("Colour?", GREEDY, [image]))
    assert isinstance(refused, RequestFailed) and "cannot see images" in refused.message
    text = recorder.wait(worker.send_message("Hello", GREEDY.with_changes(max_tokens=4)))
    assert isinstance(text, ReplyFinished)


def png_bytes(colour: str) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), colour).save(buffer, "PNG")
    return buffer.getvalue()
