"""How the desktop app loads a model: under this machine's plan when it is profiled.

One place decides the load parameters for the first load, a context-length
change and a model switch, so all three agree with `shardchat chat --vram`.
Without a stored profile the model loads with llama-cpp-python's CPU defaults
and no plan, and the window says the machine is not profiled. A placement chosen
by hand (engine.planning.placement_choice: CPU only, whole layers, experts in host memory)
goes through here too, so the GUI and `shardchat chat --placement` agree.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from app.machine_profile import this_machine_profile
from app.model_lifecycle.auto_budget import AutoBudget, first_gpu
from engine.errors import BadInputError, ShardChatError
from engine.llama.load_params import DEFAULT_PARALLEL, DEFAULT_SHARED_CELLS, LoadParams
from engine.machine.gpu_probe import probe_gpus
from engine.machine.hardware_info import GpuInfo
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, read_inventory
from engine.planning.placement_choice import (
    AUTO,
    NO_GPU,
    PlacementChoice,
    PlacementKind,
    load_params_for_plan,
    plan_for_choice,
    select_gpu,
)
from engine.planning.plan import Plan, PlanRequest

if TYPE_CHECKING:
    from app.model_lifecycle.vision_planning import VisionChoice

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlannedLoad:
    params: LoadParams
    plan: Plan | None
    profile: Profile | None
    mmproj_path: str | None = None
    vision: VisionChoice | None = None  # with a projector: how its encoder runs
    vision_problem: str | None = None  # why the paired projector cannot be used


@dataclass(frozen=True)
class ContextShape:
    """The loaded model's context beside the conversation: how many other sequences (API
    clients, a summary job's documents) and the KV cells they share.

    By default there are no shared cells: a chat alone uses none, and on a GPU they
    would take VRAM the plan can give to weights. The pool is made when an activity
    that needs it starts (`with_pool`, ResidentModel.reshape).

    A headless server (`for_server`) has no conversation to share the context with:
    each of its slots gets a KV stream of its own instead (`per_slot`), as
    llama-server's slots do (engine.llama.load_params.KV_LAYOUT says why)."""

    n_parallel: int = DEFAULT_PARALLEL
    shared_cells: int = 0  # with per_slot: what the slots hold together
    per_slot: bool = False

    @classmethod
    def with_pool(cls) -> ContextShape:
        """What the API's clients and a summary job share in the desktop app."""
        return cls(DEFAULT_PARALLEL, DEFAULT_SHARED_CELLS)

    @classmethod
    def of(cls, params: LoadParams) -> ContextShape:
        return cls(params.n_parallel, params.n_ctx_shared, per_slot=not params.kv_unified)

    @classmethod
    def for_server(cls, n_slots: int, n_ctx_per_slot: int) -> ContextShape:
        """What `shardchat serve` with `n_slots` slots of `n_ctx_per_slot` tokens needs: one
        sequence per slot, each a KV stream of that size."""
        return cls(n_slots, n_slots * n_ctx_per_slot, per_slot=True)

    def window(self, n_ctx: int) -> int:
        """The conversation's window a load with this shape gets for `n_ctx`: with a stream
        per slot every stream is the window's size, so it is at least a slot's."""
        if not self.per_slot or self.n_parallel == 0:
            return n_ctx
        return max(n_ctx, self.shared_cells // self.n_parallel)


@dataclass(frozen=True)
class LoadRequest:
    """A model to load under a plan made where it loads (reading a GGUF takes seconds)."""

    model_path: str
    n_ctx: int
    profile: Profile | None
    budget_bytes: int | None = None  # None: what other programs leave free
    mmproj_path: str | None = None  # the paired vision projector, if any
    choice: PlacementChoice = AUTO  # the planner's placement, CPU only, or one by hand
    gpu: int | None = None  # which GPU (llama.cpp's index); None: the first
    prompt_format: str | None = None  # None: the model's setting in the model library
    n_threads: int | None = None  # None: the physical cores
    shape: ContextShape = ContextShape()  # the sequences beside the conversation

    def planned(self) -> PlannedLoad:
        inventory = read_inventory(self.model_path) if self.profile is not None else None
        load = planned_load(
            self.model_path, self.n_ctx, self.profile, self.budget_bytes, inventory,
            self.choice, self.gpu, shape=self.shape,
        )  # fmt: skip
        if self.n_threads is not None:
            threads = {"n_threads": self.n_threads, "n_threads_batch": self.n_threads}
            load = replace(load, params=load.params.with_changes(**threads))
        if self.mmproj_path is None:
            return load
        return with_vision(load, inventory, self.mmproj_path, self.budget_bytes, self.choice)


def with_vision(
    load: PlannedLoad,
    inventory: ModelInventory | None,
    mmproj_path: str,
    budget_bytes: int | None,
    choice: PlacementChoice,
) -> PlannedLoad:
    """`load` with its projector planned in: VLMOpt's options and, when the encoder needs
    room the plan's resident set takes, the smaller resident set VLMOpt chose instead.

    The one way a plan gets its projector: a first load and every re-plan of a loaded
    model (a new budget, a new placement) come through here, so the language model and
    the encoder together stay within the budget after a change as after a load.
    """
    from app.model_lifecycle.vision_planning import planned_vision  # with a projector only

    try:
        vision = planned_vision(inventory, mmproj_path, load.plan, load.profile, budget_bytes)
    except ShardChatError as exc:  # a bad projector leaves a working text model
        return replace(load, mmproj_path=mmproj_path, vision_problem=str(exc))
    if vision.language_plan is not None and inventory is not None:  # a smaller resident set
        if choice.is_manual:  # the user's placement stands; VLMOpt's needs it smaller
            problem = (
                f"the vision encoder needs a smaller resident set than placement "
                f"{choice} leaves (choose fewer layers, or auto)"
            )
            return replace(load, mmproj_path=mmproj_path, vision_problem=problem)
        extras = load.plan.extras if load.plan is not None else {}
        language = replace(vision.language_plan, extras={**extras, **vision.language_plan.extras})
        params = load_params_for_plan(language, inventory, load.params.model_path)
        load = replace(load, params=params, plan=language)
    return replace(load, mmproj_path=mmproj_path, vision=vision)


def stored_profile() -> Profile | None:
    """This machine's newest profile for this llama.cpp build, if it was ever profiled."""
    return this_machine_profile()


def planned_load(
    model_path: str,
    n_ctx: int,
    profile: Profile | None,
    budget_bytes: int | None = None,
    inventory: ModelInventory | None = None,
    choice: PlacementChoice = AUTO,
    gpu: int | None = None,
    exact_budget: bool = False,
    shape: ContextShape = ContextShape(),
) -> PlannedLoad:
    """Plan for `budget_bytes` (default: what other programs leave free on the chosen GPU)
    within the GPU, under `choice`; `inventory`: the model's, when the caller has read it.
    `exact_budget`: a budget the user typed, refused (not cut) when the GPU is smaller.

    CPU only needs no profile: without one the model loads with no GPU device at all.
    A placement by hand does (it is costed beside the planner's), and one that does not
    fit the budget is refused rather than shrunk. `shape`: the context's other
    sequences (API clients, a job's documents), which the plan's account covers.
    """
    n_ctx = shape.window(n_ctx)
    if profile is None:
        shaped = LoadParams(
            model_path, n_ctx=n_ctx, n_parallel=shape.n_parallel,
            n_ctx_shared=shape.shared_cells, kv_unified=not shape.per_slot,
        )  # fmt: skip
        if choice.kind is PlacementKind.CPU:
            params = shaped.with_changes(op_offload=False, main_gpu=NO_GPU)
            return PlannedLoad(params, None, None)
        if choice.is_manual:
            raise BadInputError(
                f"placement {choice} needs this machine's profile; run `shardchat profile "
                "--fast` first"
            )
        return PlannedLoad(shaped, None, None)
    inventory = inventory or read_inventory(model_path)
    selection = select_gpu(profile, gpu)
    profile = selection.profile
    if selection.note:
        log.info("%s", selection.note)
    budget = 0
    if exact_budget and budget_bytes is not None:
        budget = budget_bytes
    elif profile.gpu is not None:
        if budget_bytes is None:
            budget_bytes = AutoBudget(lambda _budget: None).budget_for(_gpu_info(selection.index))
        budget = min(budget_bytes, profile.gpu.vram_total_bytes)
    request = PlanRequest(
        budget, n_ctx=n_ctx, parallel_sequences=shape.n_parallel,
        shared_cells=shape.shared_cells, kv_unified=not shape.per_slot,
    )  # fmt: skip
    plan = plan_for_choice(inventory, profile, request, choice, selection.index)
    return PlannedLoad(load_params_for_plan(plan, inventory, model_path), plan, profile)


def _gpu_info(index: int) -> GpuInfo | None:
    """This machine's GPU `index` now (its free memory sets the automatic budget)."""
    if index == 0:
        return first_gpu()
    gpus, _reason, _driver, _cuda = probe_gpus()
    return gpus[index] if index < len(gpus) else None
