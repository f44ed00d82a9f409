"""Which split of a model over this machine and the lent computers to run, and why.

`chat --lent` runs it and `plan --lent` shows it, so both ask this one function. The
planner chooses (engine.planning.split_costing) when it has the figures: this
machine's profile, and each lent computer's link and speed as `devices add` measured
them. Without them it is the plain memory fill (engine.planning.machine_split), and
the line says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psutil

from app.lent.computers import ReachedComputer, stored_computers
from app.machine_profile import this_machine_profile
from app.model_lifecycle.load_planning import LoadRequest
from engine.llama.load_params import LoadParams
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, read_inventory
from engine.planning.machine_split import MachineSplit, split_across
from engine.planning.split_costing import (
    Computer,
    MeasuredDevice,
    SplitPrediction,
    predict_split,
)

HERE_MARGIN = 2**30  # left to the system and the app itself by the default --here


@dataclass(frozen=True)
class LentSplit:
    split: MachineSplit
    said: str  # one line: the split, and its prediction where there is one
    prediction: SplitPrediction | None  # None: the memory fill, unpredicted


def choose_split(
    inventory: ModelInventory,
    n_ctx: int,
    here_bytes: int,
    lent: Sequence[ReachedComputer],
    profile: Profile | None,
) -> LentSplit:
    """The split to run with `here_bytes` on this machine (whose profile is `profile`, if
    it was profiled); BadInputError when all of them cannot hold the model."""
    measured = [(c, c.link, c.speed) for c in lent if c.link and c.speed]
    if not lent or profile is None or len(measured) < len(lent):
        budgets = [(computer.endpoint, computer.budget_bytes) for computer in lent]
        split = split_across(inventory, n_ctx, here_bytes, budgets)
        why = "no profile of this machine" if profile is None else "a lent computer unmeasured"
        said = f"split: {split.describe()}" + (f" (by memory: {why})" if lent else "")
        return LentSplit(split, said, None)
    cell = predict_split(
        inventory,
        n_ctx,
        Computer("this computer", profile, 0, room_bytes=here_bytes),
        [MeasuredDevice(c.endpoint, c.budget_bytes, speed) for c, _link, speed in measured],
        [link for _c, link, _speed in measured],
    )
    if not cell.chosen:
        alone = MachineSplit(inventory.n_layer, inventory.n_layer, ())
        said = f"this computer alone, predicted faster than a split ({cell.describe()})"
        return LentSplit(alone, said, cell)
    return LentSplit(cell.split, f"split: {cell.describe()}", cell)


def default_here_budget() -> int:
    """What this machine gives the model by default: the memory free now, less a margin."""
    return max(int(psutil.virtual_memory().available) - HERE_MARGIN, 0)


def planned_lent_split(
    inventory: ModelInventory, n_ctx: int, profile: Profile | None, here_bytes: int | None = None
) -> LentSplit | None:
    """What `chat --lent` would run now, from the stored figures (nothing is contacted);
    None when no lent computer is kept. `here_bytes`: default, the memory free now less a
    margin. BadInputError when even all of them cannot hold the model."""
    stored = stored_computers()
    if not stored:
        return None
    here = here_bytes if here_bytes is not None else default_here_budget()
    return choose_split(inventory, n_ctx, here, stored, profile)


def split_for_model(model_path: str, n_ctx: int) -> LentSplit | None:
    """`planned_lent_split` for a model file, on this machine's own profile. The window
    asks at every load, and mostly no computer is lent: then neither the model's header
    nor the profile is read."""
    stored = stored_computers()
    if not stored:
        return None
    inventory, profile = read_inventory(model_path), this_machine_profile()
    return choose_split(inventory, n_ctx, default_here_budget(), stored, profile)


def split_params(
    request: LoadRequest, lent: Sequence[ReachedComputer], here_bytes: int | None
) -> tuple[LentSplit, LoadParams]:
    """The window's load of `request` across `lent` (what answers now, less what died
    under it): the split chosen as for `chat --lent`, and the parameters that load it.
    This machine's part runs on its CPU, as `chat --lent` runs it."""
    inventory = read_inventory(request.model_path)
    here = here_bytes if here_bytes is not None else default_here_budget()
    chosen = choose_split(inventory, request.n_ctx, here, lent, this_machine_profile())
    shape = request.shape
    params = LoadParams(
        request.model_path,
        n_ctx=request.n_ctx,
        n_threads=request.n_threads,
        n_threads_batch=request.n_threads,
        n_parallel=shape.n_parallel,
        n_ctx_shared=shape.shared_cells,
    )
    return chosen, chosen.split.load_params(params)
