"""What the engine worker reports back, as plain frozen values.

Events cross threads: the worker emits them on its own thread through one
callback; the CLI puts them on a queue, the GUI turns them into queued Qt
signals. Every event names the request it answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.generation.stats import GenerationStats


@dataclass(frozen=True)
class ModelLoaded:
    request_id: int
    model_path: str
    model_name: str  # the readable name (engine.model.model_naming), shown wherever a name is
    architecture: str
    n_params: int
    n_ctx: int
    load_seconds: float
    load_params: dict[str, Any]
    plan: Any = None  # the engine.planning.plan.Plan it runs under, or None (not profiled)
    vision: str | None = None  # the projector's VLMOpt choices when it sees images
    vision_problem: str | None = None  # why a paired projector could not be used
    prompt_format: str = ""  # the prompt format its conversations are written in
    prompt_format_reason: str = ""  # why that one (engine.model.prompt_format)
    thinking_switch: bool = False  # the chat template can be told to think or not
    base_model: bool = False  # pretrained only, not tuned to chat (engine.model.model_purpose)
    general_name: str = ""  # the GGUF's own general.name, as the converter wrote it
    split: str = ""  # its split across lent computers, in one line; "" when it runs here


@dataclass(frozen=True)
class PlanChanged:
    """The budget changed and the engine re-planned; `reloaded` when the placement moved.

    Request id 0: the engine re-planned by itself, to make the shared KV pool an activity
    needs (the API's first client, a summary job)."""

    request_id: int
    vram_budget_bytes: int
    reloaded: bool
    reason: str
    predicted_decode_tokens_per_s: float
    predicted_ttft_s: float
    n_gpu_layers: int
    plan: Any = None  # the new engine.planning.plan.Plan, for panels that show the whole account
    # Under a placement chosen by hand: the plan the planner would have made at this
    # budget, so the panel can set the two predictions side by side (planned on the worker).
    planner_plan: Any = None


@dataclass(frozen=True)
class PlacementFellBack:
    """A manual placement did not fit a new budget: the planner's choice runs until it does.

    Sent before the PlanChanged of the same request; not a final event.
    """

    request_id: int
    requested: str  # the placement asked for, e.g. "layers:20"
    message: str  # what it needs, for the user


@dataclass(frozen=True)
class PromptFormatChosen:
    """The loaded model's prompt format after a setting changed, and why it is that one."""

    request_id: int
    name: str
    kind: str  # template, builtin or completion
    reason: str


@dataclass(frozen=True)
class ModelUnloaded:
    request_id: int
    model_path: str | None


@dataclass(frozen=True)
class ConversationStarted:
    request_id: int
    n_messages: int


@dataclass(frozen=True)
class TokenStreamed:
    request_id: int
    text: str
    thinking: str = ""  # a piece of a reasoning model's thinking (text is then empty)


@dataclass(frozen=True)
class ReplyFinished:
    request_id: int
    text: str
    stats: GenerationStats
    dropped_messages: int
    steps: tuple[Any, ...] = ()  # engine.runtime.step_log.StepRecord per llama_decode, if planned
    context_window: int = 0  # tokens the model's window holds; the turn used prompt + reply

    @property
    def context_used(self) -> int:
        return self.stats.prompt_tokens + self.stats.generated_tokens

    thinking: str = ""  # a reasoning model's thinking, apart from the answer in text


@dataclass(frozen=True)
class JobProgressed:
    """A summarisation job moved on (app.summaries.summary_job.JobProgress, with the file just
    finished)."""

    request_id: int
    progress: Any


@dataclass(frozen=True)
class JobFinished:
    """A summarisation job ended, done or cancelled (app.summaries.summary_job.JobOutcome)."""

    request_id: int
    outcome: Any


@dataclass(frozen=True)
class RequestFailed:
    """A request that could not be done; `bad_input` separates user mistakes from bugs."""

    request_id: int
    message: str
    bad_input: bool


@dataclass(frozen=True)
class EngineLost:
    """The child engine of a model split onto lent computers died (app.engine_host.engine_router).

    The requests it had not answered were failed first. `gone`: the lent computers
    that stopped answering, which the next load leaves out; `reload`: load the model
    again (it was loaded, or it can load without what died)."""

    request_id: int  # 0: it answers no request
    message: str
    gone: tuple[str, ...]
    reload: bool


EngineEvent = (
    ModelLoaded
    | ModelUnloaded
    | ConversationStarted
    | PlanChanged
    | PlacementFellBack
    | PromptFormatChosen
    | TokenStreamed
    | ReplyFinished
    | JobProgressed
    | JobFinished
    | RequestFailed
    | EngineLost
)
FINAL_EVENTS = (
    ModelLoaded,
    ModelUnloaded,
    ConversationStarted,
    PlanChanged,
    PromptFormatChosen,
    ReplyFinished,
    JobFinished,
    RequestFailed,
)
