"""The model the chat talks to: loading, loaded or failed, with what the window says of it.

A load is queued on the worker and answered later by ModelLoaded or
RequestFailed. Until then the input waits. A file the worker refused before
freeing anything (a bad GGUF) leaves the model that was loaded in place, so the
status keeps what it said of that model to say it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.engine_host.events import ModelLoaded, PromptFormatChosen, RequestFailed
from app.model_lifecycle.load_planning import LoadRequest, PlannedLoad
from engine.machine.profile import Profile
from engine.model.prompt_format import COMPLETION
from engine.planning.plan import Plan

NO_MODEL_LABEL = "no model loaded"
LOADING_LABEL = "loading model…"
# A base model written to as plain text: said on the model line, so that replies that read
# like continued text rather than answers are explained where the model is named.
BASE_MODEL_NOTE = "base model: plain completion"
BASE_MODEL = "base model"  # a base model whose prompt-format setting chose another format


@dataclass(frozen=True)
class _Kept:
    """A loaded model's figures, kept while another loads in case that one is refused."""

    model_path: str
    n_ctx: int
    plan: Plan | None
    label: str


class ModelStatus:
    """What is loaded or loading, under which plan, and whether the chat can use it."""

    def __init__(self, load: LoadRequest | PlannedLoad) -> None:
        self.model_path, self.n_ctx = path_and_context(load)
        self.mmproj = load.mmproj_path  # the paired vision projector, if any
        self.profile = load.profile
        self.plan: Plan | None = None
        self.ready = False
        self.failed = False  # the last load failed and no model is left
        self.request_id: int | None = None  # the load under way (or the last one)
        self.name = ""
        self.label = ""  # what the model label says of it
        self.vision: str | None = None  # the VLMOpt choices while the model sees images
        self.thinking_switch = False  # the model's template can be told to think or not
        self.prompt_format = ""  # which prompt format the loaded model got, and why
        self.base_model = False  # the loaded model is pretrained only (model_purpose)
        self._described = ""  # the model line without what it says of a base model
        self._kept: _Kept | None = None

    def begin(self, load: LoadRequest | PlannedLoad) -> None:
        """A load is about to be queued: the current model is no longer usable, but kept in mind."""
        self._kept = None
        if self.ready:
            self._kept = _Kept(self.model_path, self.n_ctx, self.plan, self.label)
        self.model_path, self.n_ctx = path_and_context(load)
        self.mmproj = load.mmproj_path
        self.profile = load.profile
        self.ready = False
        self.vision = None
        self.label = LOADING_LABEL

    def request(
        self, n_ctx: int | None = None, model_path: str | None = None, mmproj: str | None = None
    ) -> LoadRequest:
        """A load of this model (or another, with its projector) under the same budget."""
        if model_path is None:
            model_path, mmproj = self.model_path, self.mmproj
        n_ctx = self.n_ctx if n_ctx is None else n_ctx
        return LoadRequest(model_path, n_ctx, self.profile, self.budget(), mmproj)

    def reprofiled(
        self, profile: Profile | None, model_path: str | None, mmproj: str | None
    ) -> LoadRequest:
        """A load planned afresh from a new profile (no budget carried over)."""
        if model_path is None:
            model_path, mmproj = self.model_path, self.mmproj
        return LoadRequest(model_path, self.n_ctx, profile, None, mmproj)

    def loaded(self, event: ModelLoaded) -> bool:
        """The worker answered a load; False when it was not the one asked for last."""
        if event.request_id != self.request_id:
            return False
        self.ready, self.failed = True, False
        self.plan = event.plan
        self.name = event.model_name
        self.vision = event.vision
        self.thinking_switch = event.thinking_switch
        sees = " · sees images" if event.vision else ""
        self._described = f"{event.model_name} · {event.architecture} · {event.n_ctx} tokens{sees}"
        self.base_model = event.base_model
        self.label = self._model_line(event.prompt_format)
        self.prompt_format = f"Prompt format: {event.prompt_format} ({event.prompt_format_reason})"
        return True

    def load_failed(self, event: RequestFailed) -> bool:
        """The load failed; True when the model loaded before it is still there and usable."""
        if not event.bad_input or self._kept is None:
            self.label, self.failed = NO_MODEL_LABEL, True
            return False
        kept = self._kept
        self.model_path, self.n_ctx, self.plan, self.label = (
            kept.model_path, kept.n_ctx, kept.plan, kept.label
        )  # fmt: skip
        self.ready = True
        return True

    def format_chosen(self, event: PromptFormatChosen) -> str:
        self.prompt_format = f"Prompt format: {event.name} ({event.reason})"
        if self.ready:
            self.label = self._model_line(event.name)
        return self.prompt_format

    def _model_line(self, prompt_format: str) -> str:
        if not self.base_model:
            return self._described
        note = BASE_MODEL_NOTE if prompt_format == COMPLETION else BASE_MODEL
        return f"{self._described} · {note}"

    def tooltip(self) -> str:
        vision = [f"Vision: {self.vision}"] if self.vision else []
        return "\n".join([self.prompt_format, *vision])

    def budget(self) -> int | None:
        return self.plan.vram.budget_bytes if self.plan else None

    def coming(self) -> bool:
        """A model is loaded or on its way (the chat's empty state invites a question)."""
        return self.ready or self.request_id is not None and not self.failed

    def is_loaded(self, model_path: str) -> bool:
        return self.ready and Path(model_path).resolve() == Path(self.model_path).resolve()


def path_and_context(load: LoadRequest | PlannedLoad) -> tuple[str, int]:
    if isinstance(load, PlannedLoad):
        return str(load.params.model_path), load.params.n_ctx
    return load.model_path, load.n_ctx
