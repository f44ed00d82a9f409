"""Engine events as Qt signals, delivered on the GUI thread.

The worker calls its event callback on its own thread. Handing that callback
this bridge makes every event a signal emission; Qt queues emissions that
cross threads, so slots run on the GUI thread and widgets never touch the
engine, nor wait for it.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.engine_host.events import (
    ConversationStarted,
    EngineEvent,
    EngineLost,
    JobFinished,
    JobProgressed,
    ModelLoaded,
    ModelUnloaded,
    PlacementFellBack,
    PlanChanged,
    PromptFormatChosen,
    ReplyFinished,
    RequestFailed,
    TokenStreamed,
)


class EngineBridge(QObject):
    """Callable from any thread; re-emits each engine event as the matching signal."""

    any_event = Signal(object)  # every event, for logs and status bars
    model_loaded = Signal(object)  # ModelLoaded
    model_unloaded = Signal(object)  # ModelUnloaded
    conversation_started = Signal(object)  # ConversationStarted
    plan_changed = Signal(object)  # PlanChanged
    placement_fell_back = Signal(object)  # PlacementFellBack: a manual placement did not fit
    prompt_format_chosen = Signal(object)  # PromptFormatChosen
    token_streamed = Signal(int, str)  # request id, text piece
    thinking_streamed = Signal(int, str)  # request id, piece of a reasoning model's thinking
    reply_finished = Signal(object)  # ReplyFinished
    job_progressed = Signal(object)  # JobProgressed
    job_finished = Signal(object)  # JobFinished
    request_failed = Signal(object)  # RequestFailed
    engine_lost = Signal(object)  # EngineLost: a split model's engine process died

    def __call__(self, event: EngineEvent) -> None:
        self.any_event.emit(event)
        if isinstance(event, TokenStreamed):
            if event.thinking:
                self.thinking_streamed.emit(event.request_id, event.thinking)
            if event.text:
                self.token_streamed.emit(event.request_id, event.text)
            return
        getattr(self, _SIGNAL_BY_EVENT[type(event)]).emit(event)


_SIGNAL_BY_EVENT: dict[type, str] = {
    ModelLoaded: "model_loaded",
    ModelUnloaded: "model_unloaded",
    ConversationStarted: "conversation_started",
    PlanChanged: "plan_changed",
    PlacementFellBack: "placement_fell_back",
    PromptFormatChosen: "prompt_format_chosen",
    ReplyFinished: "reply_finished",
    JobProgressed: "job_progressed",
    JobFinished: "job_finished",
    RequestFailed: "request_failed",
    EngineLost: "engine_lost",
}
