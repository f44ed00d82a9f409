"""What other threads ask of the engine worker: one value per request, queued in order.

Controls (loading, unloading, re-planning, the prompt format) change the
resident model and wait until no conversation turn or summary job uses it;
a message and a summary become activities of the worker's one loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from app.model_lifecycle.load_planning import LoadRequest, PlannedLoad
from app.stores.stored_history import StoredHistory
from engine.cancel import CancelToken
from engine.generation.sampling import SamplingSettings
from engine.llama.load_params import LoadParams
from engine.machine.profile import Profile
from engine.model.chat_message import ChatMessage
from engine.model.image_input import ImageFile
from engine.planning.placement_choice import PlacementChoice
from engine.planning.plan import Plan

if TYPE_CHECKING:  # the summary job's modules load when a summary runs
    from app.summaries.summary_job import SummarySettings


@dataclass(frozen=True)
class LoadModel:
    params: LoadParams
    plan: Plan | None = None
    profile: Profile | None = None
    prompt_format: str | None = None  # None: the model's setting in the model library
    planned: PlannedLoad | None = None  # with its projector planned in: the model sees images


@dataclass(frozen=True)
class LoadPlanned:
    request: LoadRequest


@dataclass(frozen=True)
class UnloadModel:
    pass


@dataclass(frozen=True)
class StartConversation:
    system_prompt: str | None
    history: tuple[ChatMessage, ...] | StoredHistory  # the latter read on the engine's thread


@dataclass(frozen=True)
class SendMessage:
    text: str
    settings: SamplingSettings
    images: tuple[ImageFile, ...] = ()
    thinking: bool | None = None  # think or not, where the template has the switch


@dataclass(frozen=True)
class Summarize:
    input_folder: Path
    output_folder: Path | None
    settings: SummarySettings


@dataclass(frozen=True)
class SetBudget:
    vram_budget_bytes: int


@dataclass(frozen=True)
class SetPlacement:
    choice: PlacementChoice


@dataclass(frozen=True)
class SetPromptFormat:
    name: str


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class CloseApi:
    pass


@dataclass
class Queued:
    """A request with its id and the token that cancels it."""

    request_id: int
    request: object
    cancel: CancelToken = field(default_factory=CancelToken)


@dataclass(frozen=True)
class Wake:
    """An API job arrived: the loop, waiting on the queue, looks again."""


CHAT_REQUESTS = (SendMessage, StartConversation)
CONTROL_REQUESTS = (LoadModel, LoadPlanned, UnloadModel, SetBudget, SetPlacement, SetPromptFormat)
