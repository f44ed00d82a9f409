"""How much device memory a placement needs besides its weights: compute buffers and margin.

The planner fills VRAM up to the budget minus these, so an estimate that is
too small overruns a real GPU's memory (the out-of-memory failure users know
from other apps) and one that is too large wastes VRAM they paid for. The
formulas follow what llama.cpp allocates when it reserves its worst-case graph
(llama_context's graph reserve); tests/gpu checks them against the device
buffers llama.cpp really allocates on a Vulkan device.
"""

from __future__ import annotations

from engine.inventory import ModelInventory
from engine.plan import PlanRequest

MIB = 1024 * 1024
MIN_MARGIN_BYTES = 128 * MIB
MARGIN_SHARE = 0.05


def margin_bytes(budget_bytes: int) -> int:
    """The safety margin kept free of a budget (driver and allocator slack)."""
    return max(MIN_MARGIN_BYTES, int(MARGIN_SHARE * budget_bytes))


def compute_bytes(inventory: ModelInventory, request: PlanRequest, ubatch: int) -> int:
    """llama.cpp's scratch for one ubatch: f32 activations, logits, flash-attention tiles."""
    width = max(inventory.n_embd or 0, 1)
    logits = (inventory.n_vocab or 0) * 4 * request.n_parallel
    return ubatch * width * 4 * 16 + logits + 4 * width * request.n_ctx


def fixed_vram(inventory: ModelInventory, request: PlanRequest, ubatch: int) -> dict[str, int]:
    """Compute buffers for one ubatch, and a safety margin."""
    return {
        "compute": compute_bytes(inventory, request, ubatch),
        "margin": margin_bytes(request.vram_budget_bytes),
    }
