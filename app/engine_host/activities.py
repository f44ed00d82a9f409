"""What runs on the loaded model between requests: the conversation's turn and a summary job.

The engine worker's loop knows each activity through one small interface:
before every step it asks each to `advance` (hand out what the last step
gave its streams, admit what is next), and it ends them with `end` when it
stops. The API's streams (app.api.api_streams) are the third activity; the
scheduler itself does not know which activity a stream belongs to.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Protocol

from app.engine_host.engine_requests import Queued
from app.engine_host.events import EngineEvent, JobFinished, ReplyFinished, TokenStreamed
from app.model_lifecycle.resident_model import ResidentModel
from engine.runtime.chat import ChatTurn

if TYPE_CHECKING:
    from app.summaries.summary_job import JobOutcome

Emit = Callable[[EngineEvent], None]
Ended = Callable[[Queued, Exception | None], None]  # the request, and why it failed if it did


class Activity(Protocol):
    """A request in progress on the loaded model: its streams ride the scheduler's steps."""

    entry: Queued

    def advance(self) -> bool:
        """Hand out what the last step gave; False once the activity is over."""
        ...

    def end(self) -> None:
        """Stop where it is (the worker stops)."""
        ...


class ConversationTurn:
    """The window's message and its reply, in the conversation's sequence."""

    def __init__(
        self, entry: Queued, turn: ChatTurn, resident: ResidentModel, emit: Emit, ended: Ended
    ) -> None:
        self.entry, self._turn, self._resident = entry, turn, resident
        self._emit, self._ended = emit, ended

    def advance(self) -> bool:
        request_id = self.entry.request_id
        if self.entry.cancel.cancelled:
            self._turn.abandon()  # ends now, not after one more step
        answer, thought = self._turn.take()
        if thought:
            self._emit(TokenStreamed(request_id, "", thought))
        if answer:
            self._emit(TokenStreamed(request_id, answer))
        if not self._turn.done:
            return True
        try:
            reply = self._turn.finish()
        except Exception as exc:
            self._ended(self.entry, exc)
            return False
        model = self._resident.require()
        steps = self._resident.drain_steps()
        self._emit(
            ReplyFinished(
                request_id, reply.text, reply.stats, reply.dropped_messages, steps,
                model.n_ctx, reply.thinking,
            )
        )  # fmt: skip
        self._ended(self.entry, None)
        return False

    def end(self) -> None:
        self._turn.abandon()


class SummaryRun:
    """A summary job's documents, a few at a time in the context's parallel sequences."""

    def __init__(
        self, entry: Queued, steps: Generator[None, None, JobOutcome], emit: Emit, ended: Ended
    ) -> None:
        self.entry, self._steps, self._emit, self._ended = entry, steps, emit, ended

    def advance(self) -> bool:
        try:
            next(self._steps)
            return True
        except StopIteration as finished:
            self._emit(JobFinished(self.entry.request_id, finished.value))
            self._ended(self.entry, None)
        except Exception as exc:
            self._ended(self.entry, exc)
        return False

    def end(self) -> None:
        self._steps.close()  # the job's store and sequences are let go
