"""How the desktop app loads a model: under this machine's plan when it is profiled.

One place decides the load parameters for the first load, a context-length
change and a model switch, so all three agree with `shardchat chat --vram`.
Without a stored profile the model loads with llama-cpp-python's CPU defaults
and no plan, and the window says the machine is not profiled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.auto_budget import AutoBudget, first_gpu
from app.profile_store import ProfileStore
from app.vision_planning import VisionChoice, planned_vision
from engine.errors import ShardChatError
from engine.hardware import probe_hardware
from engine.inventory import ModelInventory, read_inventory
from engine.model_params import LoadParams
from engine.plan import Plan, PlanRequest
from engine.plan_execution import load_params_for
from engine.planner import make_plan
from engine.profile import Profile


@dataclass(frozen=True)
class PlannedLoad:
    params: LoadParams
    plan: Plan | None
    profile: Profile | None
    mmproj_path: str | None = None
    vision: VisionChoice | None = None  # with a projector: how its encoder runs
    vision_problem: str | None = None  # why the paired projector cannot be used


@dataclass(frozen=True)
class LoadRequest:
    """A model to load under a plan made where it loads (reading a GGUF takes seconds)."""

    model_path: str
    n_ctx: int
    profile: Profile | None
    budget_bytes: int | None = None  # None: what other programs leave free
    mmproj_path: str | None = None  # the paired vision projector, if any

    def planned(self) -> PlannedLoad:
        inventory = read_inventory(self.model_path) if self.profile is not None else None
        load = planned_load(self.model_path, self.n_ctx, self.profile, self.budget_bytes, inventory)
        if self.mmproj_path is None:
            return load
        try:
            vision = planned_vision(
                inventory, self.mmproj_path, load.plan, load.profile, self.budget_bytes
            )
        except ShardChatError as exc:  # a bad projector leaves a working text model
            return replace(load, mmproj_path=self.mmproj_path, vision_problem=str(exc))
        if vision.language_plan is not None and inventory is not None:  # a smaller resident set
            params = load_params_for(vision.language_plan, inventory, self.model_path)
            load = replace(load, params=params, plan=vision.language_plan)
        return replace(load, mmproj_path=self.mmproj_path, vision=vision)


def stored_profile() -> Profile | None:
    """This machine's newest profile for this llama.cpp build, if it was ever profiled."""
    hardware = probe_hardware()
    with ProfileStore() as profiles:
        return profiles.latest(hardware.fingerprint(), hardware.llama_build)


def planned_load(
    model_path: str,
    n_ctx: int,
    profile: Profile | None,
    budget_bytes: int | None = None,
    inventory: ModelInventory | None = None,
) -> PlannedLoad:
    """Plan for `budget_bytes` (default: what other programs leave free) within the GPU;
    `inventory`: the model's, when the caller has read it already."""
    if profile is None:
        return PlannedLoad(LoadParams(model_path, n_ctx=n_ctx), None, None)
    inventory = inventory or read_inventory(model_path)
    budget = 0
    if profile.gpu is not None:
        if budget_bytes is None:
            budget_bytes = AutoBudget(lambda _budget: None).budget_for(first_gpu())
        budget = min(budget_bytes, profile.gpu.vram_total_bytes)
    plan = make_plan(inventory, profile, PlanRequest(budget, n_ctx=n_ctx))
    return PlannedLoad(load_params_for(plan, inventory, model_path), plan, profile)
