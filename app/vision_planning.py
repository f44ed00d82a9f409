"""How a model's vision projector runs on this machine: the VLMOpt choices for a load.

The GUI, `shardchat ask-image` and the worker ask here, so all three make the
same choice from the same profile and budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.profile import Profile
from engine.vision_options import VisionOptions


@dataclass(frozen=True)
class VisionChoice:
    """The options the vision runtime runs with, and one line saying what was chosen and why."""

    options: VisionOptions
    summary: str


def planned_vision(
    model_path: str,
    mmproj_path: str,
    n_ctx: int,
    budget_bytes: int | None,
    profile: Profile | None = None,
) -> VisionChoice:
    """VLMOpt for this pair under the budget (None: what other programs leave free)."""
    options = VisionOptions(reason="no GPU budget: the encoder runs on the CPU")
    return VisionChoice(options, f"{options.describe()} ({options.reason})")
