"""Whether a plan's streamed prompt steps upload their weights ahead, through staging slots.

ShardChat's llama.cpp can upload streamed weights ahead of the compute that needs
them, through N rotating staging slots on a second queue of the GPU
(engine.llama.prefetch); the cost model then charges a streamed sub-layer the
longer of its upload and its compute instead of their sum. The slots are a
buffer of their own beside the compute buffer, while serial copies share the
compute buffer with the activations of other phases (a large vocabulary's logits
often hide them entirely), so the overlap can cost VRAM that would hold weights.
The planner therefore fills each ubatch twice, serial and with STAGED_SLOTS
slots (upstream measured 3 to 4 paying and more not), the staged fill with the
slots' room kept first, and its usual choice (decode first, then time to first
token) decides. A staged plan whose overlap saves under 1 % of a prompt step is
not made: nothing worth hiding streams.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from engine.model.inventory import ModelInventory, SubLayer
from engine.planning.cost_model import CostModel, Placement
from engine.planning.plan import PlanRequest
from engine.planning.vram_account import MIB, compute_bytes, runs_on_device, staging_bytes

STAGED_SLOTS = 3
MIN_GAIN = 1.01
SERIAL = "weights copied as each split starts"


@dataclass(frozen=True)
class PrefetchChoice:
    slots: int
    predicted_gain: float  # a full-ubatch streamed step's time, serial over overlapped
    reason: str


def working_memory_beyond(
    inventory: ModelInventory, request: PlanRequest, ubatch: int, slots: int
) -> int:
    """The compute buffer a plan keeps before it fills VRAM with weights, as if every
    weight streamed: the copies of a step (serial), or `slots` slots of the largest
    block tensor (the output head, filled before any block's weights, rarely streams;
    a plan where it does is refused when its account is checked)."""
    if not slots:
        return compute_bytes(inventory, request, ubatch, True, inventory.all_sublayers())
    blocks = [s for b in inventory.blocks for s in b.sublayers]
    return compute_bytes(inventory, request, ubatch, True, blocks, slots)


def staged_prompts(
    inventory: ModelInventory,
    model: CostModel,
    ubatch: int,
    streamed: Sequence[SubLayer],
    placement: Placement,
    threads: int,
    slots: int,
) -> PrefetchChoice | None:
    """How a placement streaming `streamed` at `ubatch` tokens runs its prompts with
    `slots` slots; None where staging them would not pay."""
    staged = [s for s in streamed if runs_on_device(inventory, s)]
    if not slots:
        return PrefetchChoice(0, 1.0, SERIAL if staged else "no weights stream")
    if not staged:
        return None
    serial = model.predict_step(inventory, ubatch, threads, placement=placement).seconds
    ahead = replace(placement, prefetch_slots=slots)
    gain = serial / model.predict_step(inventory, ubatch, threads, placement=ahead).seconds
    if gain < MIN_GAIN:
        return None
    staging = staging_bytes(inventory, staged, slots)
    return PrefetchChoice(
        slots,
        gain,
        f"{slots} staging slots ({staging / MIB:.1f} MiB) upload streamed weights while the "
        f"GPU computes: {gain:.2f}x a {ubatch}-token step",
    )
