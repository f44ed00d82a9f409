"""API streams, a GUI chat and a summary job on one engine worker: sequences of the model's
one context, advanced together in the same steps, so none waits for another to finish."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from api_server_fixtures import Serving, start_serving

from app.engine_host.events import JobFinished, JobProgressed, ReplyFinished
from app.summaries.summary_job import SummarySettings
from engine.generation.sampling import GREEDY
from engine.machine.profile import Profile

# a reply that cannot end early: the grammar wants 60 numbers before the end token
LONG_REPLY = {
    "type": "json_schema",
    "json_schema": {
        "name": "numbers",
        "schema": {"type": "array", "items": {"type": "integer"}, "minItems": 60},
    },
}


@pytest.fixture(scope="module")
def serving(default_model_file: Path, recorded_profile_here: Profile) -> Iterator[Serving]:
    started = start_serving(
        str(default_model_file), n_slots=2, n_ctx_per_slot=2048, profile=recorded_profile_here
    )
    yield started
    started.close()


class LongApiStream:
    """One API client streaming a long reply on a thread; counts the chunks it gets."""

    def __init__(self, serving: Serving) -> None:
        self.serving = serving
        self.chunks = 0
        self.started = threading.Event()
        self.finished = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        stream = self.serving.client().chat.completions.create(
            model=self.serving.model_id,
            messages=[{"role": "user", "content": "List numbers."}],
            response_format=LONG_REPLY, temperature=0, max_tokens=600, stream=True,
        )  # fmt: skip
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                self.chunks += 1
                self.started.set()
        self.finished.set()

    def join(self) -> None:
        self._thread.join(300)


def write_documents(folder: Path, count: int) -> Path:
    folder.mkdir()
    for n in range(count):
        text = f"Document {n}. " + "The lighthouse keeper counted the ships again. " * 12
        (folder / f"doc{n}.txt").write_text(text)
    return folder


def test_a_gui_reply_and_an_api_stream_share_steps(serving: Serving) -> None:
    api = LongApiStream(serving)
    assert api.started.wait(60)
    serving.wait_for(serving.worker.start_conversation())
    before = api.chunks
    reply = serving.wait_for(
        serving.worker.send_message("Say hello.", GREEDY.with_changes(max_tokens=24))
    )
    during = api.chunks - before
    assert isinstance(reply, ReplyFinished) and reply.stats.generated_tokens > 0
    assert not api.finished.is_set(), "the GUI reply waited for the API stream to end"
    assert during >= reply.stats.generated_tokens // 2, "the API stream stalled during the reply"
    api.join()
    assert api.finished.is_set()


def test_an_api_request_is_answered_while_a_summary_job_runs(
    serving: Serving, tmp_path: Path
) -> None:
    folder = write_documents(tmp_path / "docs", 4)
    settings = SummarySettings(max_words=30, parallel=2, n_ctx_per_sequence=512)
    job = serving.worker.summarize(folder, tmp_path / "out", settings)
    while not isinstance(serving.events.get(timeout=120), JobProgressed):
        pass  # the job is under way
    reply = serving.client().chat.completions.create(
        model=serving.model_id, messages=[{"role": "user", "content": "Hi"}],
        temperature=0, max_tokens=8,
    )  # fmt: skip
    assert reply.choices[0].finish_reason in ("stop", "length")
    pending = []
    while not isinstance(event := serving.events.get(timeout=300), JobFinished):
        pending.append(event)
    assert event.request_id == job
    assert any(isinstance(e, JobProgressed) for e in pending), "the job ended before the reply"


def test_the_chat_an_api_client_and_a_job_ride_the_same_steps(
    serving: Serving, tmp_path: Path
) -> None:
    """The step log of the chat's reply: steps that carried the conversation's token beside
    the others', and steps that carried the API client's and the job's sequences together."""
    api = LongApiStream(serving)
    assert api.started.wait(60)
    folder = write_documents(tmp_path / "docs", 8)
    settings = SummarySettings(max_words=60, parallel=2, n_ctx_per_sequence=512)
    job = serving.worker.summarize(folder, tmp_path / "out", settings)
    while not isinstance(serving.events.get(timeout=120), JobProgressed):
        pass  # the job is under way
    serving.wait_for(serving.worker.start_conversation())
    reply = serving.wait_for(
        serving.worker.send_message("Say hello.", GREEDY.with_changes(max_tokens=24))
    )
    assert isinstance(reply, ReplyFinished) and reply.steps, "a planned load logs its steps"
    carried = [set(step.sequences) for step in reply.steps]
    others = {1, 2}  # the API client's and the job's: the two parallel sequences
    assert any(0 in seqs and seqs & others for seqs in carried), carried
    assert any(others <= seqs for seqs in carried), carried
    serving.worker.cancel(job)
    serving.wait_for(job)
    api.join()
