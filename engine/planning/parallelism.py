"""How many sequences a batch job decodes at once: the planner's choice from the profile.

A decode step of k sequences carries k tokens; the cost model predicts its
time from the machine's measured kernel throughput under the plan's family
for that tier, so k / step time is the predicted aggregate decode speed. The
choice is the k among PARALLEL_CHOICES that maximises it, capped by the
number of documents and by the memory the KV cache may take (each sequence
owns a stream of n_ctx_per_sequence cells, plus one stream for the shared
prompt prefix). Callers may override it; this is the default.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil

from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory
from engine.planning.cost_model import CostModel
from engine.planning.execution import placement_for
from engine.planning.plan import Plan

PARALLEL_CHOICES = (1, 2, 4, 8, 16)
KV_MEMORY_SHARE = 0.25  # of the available system RAM, when the caller names no budget


@dataclass(frozen=True)
class ParallelismChoice:
    """The chosen parallelism, what each candidate was predicted to do, and why."""

    n_parallel: int
    predicted_tokens_per_s: dict[int, float]  # aggregate decode speed by parallelism
    memory_cap: int
    reason: str


def choose_parallelism(
    plan: Plan,
    profile: Profile,
    inventory: ModelInventory,
    n_documents: int,
    n_ctx_per_sequence: int,
    kv_budget_bytes: int | None = None,
) -> ParallelismChoice:
    """The parallelism with the best predicted aggregate decode speed that fits."""
    memory_cap = _memory_cap(plan, inventory, n_ctx_per_sequence, kv_budget_bytes)
    limit = max(1, min(n_documents, memory_cap))
    candidates = [k for k in PARALLEL_CHOICES if k <= limit] or [1]
    model = CostModel(profile)
    predicted = {k: _aggregate_tokens_per_s(model, plan, inventory, k, n_ctx_per_sequence)
                 for k in candidates}  # fmt: skip
    best = max(candidates, key=lambda k: (round(predicted[k], 6), -k))
    reason = (
        f"{best} sequences: predicted {predicted[best]:.0f} tokens/s in aggregate against "
        f"{predicted[1]:.0f} for one; capped at {limit} by {n_documents} documents and "
        f"memory for {memory_cap} sequences"
    )
    return ParallelismChoice(best, predicted, memory_cap, reason)


def _aggregate_tokens_per_s(
    model: CostModel, plan: Plan, inventory: ModelInventory, k: int, n_ctx_per_sequence: int
) -> float:
    """k tokens per decode step, each attending over about half a sequence's window."""
    threads = plan.n_threads if k == 1 else plan.n_threads_batch
    placement = placement_for(plan, plan.family_for(k))
    step = model.predict_step(inventory, k, threads, k, n_ctx_per_sequence // 2, placement)
    return k / step.seconds


def _memory_cap(
    plan: Plan, inventory: ModelInventory, n_ctx_per_sequence: int, kv_budget_bytes: int | None
) -> int:
    """Sequences whose KV streams (plus the shared-prefix stream) fit RAM, and VRAM if used."""
    budget = kv_budget_bytes
    if budget is None:
        budget = int(KV_MEMORY_SHARE * psutil.virtual_memory().available)
    per_sequence = max(inventory.kv_cache_bytes(n_ctx_per_sequence), 1)
    cap = budget // per_sequence - 1
    vram = plan.vram
    if vram.kv_cache_bytes > 0:  # resident blocks keep their KV cache in VRAM
        room = vram.budget_bytes - vram.total_bytes + vram.kv_cache_bytes
        per_sequence_vram = vram.kv_cache_bytes * n_ctx_per_sequence / plan.request.kv_cells
        cap = min(cap, int(room // per_sequence_vram) - 1)
    return max(cap, 1)
