"""How a model's vision projector runs on this machine: the VLMOpt choices for a load.

The worker (for the window) and `shardchat ask-image` ask here, so both make
the same choice from the same profile and budget. The runtime cannot yet move
the language model's resident weights out of VRAM and back around an encode,
so the planner is asked for plans that do not need that (can_step_aside off):
it keeps the model resident, shrinks its resident set, limits image tokens,
or runs the encoder on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import BadInputError
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory
from engine.planning.plan import Plan
from engine.vision.options import VisionOptions
from engine.vision.plan import plan_vision
from engine.vision.plan_choice import ResidentSet
from engine.vision.projector import projector_facts


@dataclass(frozen=True)
class VisionChoice:
    """The options the vision runtime runs with, one line of what was chosen and why, and
    the language model's plan when VLMOpt chose a smaller resident set for it."""

    options: VisionOptions
    summary: str
    language_plan: Plan | None = None


def planned_vision(
    inventory: ModelInventory | None,
    mmproj_path: str,
    plan: Plan | None,
    profile: Profile | None,
    budget_bytes: int | None = None,
) -> VisionChoice:
    """VLMOpt for this pair under the model's plan (None: not profiled, the CPU's defaults);
    the model's inventory is needed only with a plan."""
    facts = projector_facts(mmproj_path)  # refuses a file that is not a projector
    if plan is None or profile is None or inventory is None:
        options = VisionOptions(reason="this machine is not profiled")
        return VisionChoice(options, f"{options.describe()} ({options.reason})")
    try:
        vision = plan_vision(plan, inventory, facts, profile, budget_bytes, can_step_aside=False)
    except ValueError as exc:
        raise BadInputError(f"{mmproj_path}: {exc}") from exc
    reasons = "; ".join(vision.reasons)
    summary = (
        f"{vision.options.describe()}; images up to {vision.effective_resolution} px "
        f"({vision.n_tokens} tokens)"
    )
    summary += f" ({reasons})" if reasons else ""
    shrunk = vision.language_plan if vision.resident_set is ResidentSet.SHRUNK else None
    return VisionChoice(vision.options, summary, shrunk)
