"""What a llama.cpp placement puts in VRAM and what it costs, run as a llama.cpp user runs it.

Shared by the placements users choose (engine.planning.llama_placements) and
llama.cpp's own --fit (engine.planning.llama_fit).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, SubLayer, SubLayerKind
from engine.planning.cost_model import CostModel, Placement, Where
from engine.planning.plan import Plan, PlanRequest, SubLayerKey, VramAccount
from engine.planning.tier_costing import (
    assemble_plan,
    chunked_ttft,
    family_estimates,
    margin_floor,
    sort_key,
    sublayer_key,
    tier_plan,
)
from engine.planning.vram_account import MIB, MIN_MARGIN_BYTES, fixed_vram

LLAMA_CPP_DEFAULT_OFFLOAD_BATCH = 32  # GGML_OP_OFFLOAD_MIN_BATCH when unset
LLAMA_CPP_DEFAULT_UBATCH = 512
FIT_MARGIN_BYTES = 1024 * MIB  # --fit-target default (common_params::fit_params_target)
USERS_ALL_LAYERS = 999  # `-ngl 999`: every layer, whatever the model's depth
NO_CHANGES = "no changes needed"


def plan_blocks(n_gpu_layers: int) -> int:
    """A plan's n_gpu_layers (blocks) for llama.cpp's (the output layer and blocks)."""
    return max(n_gpu_layers - 1, 0)


def layer_keys(inventory: ModelInventory, n_gpu_layers: int) -> set[SubLayerKey]:
    """What `-ngl n_gpu_layers` puts in VRAM (llama.cpp's counting: the output layer and
    the last n_gpu_layers - 1 blocks)."""
    n = len(inventory.blocks)
    if n_gpu_layers <= 0:
        return set()
    start = max(n + 1 - n_gpu_layers, 0)  # i_gpu_start
    keys = {sublayer_key(s) for b in inventory.blocks[start:] for s in b.sublayers}
    return keys | {sublayer_key(s) for s in output_layer(inventory)}


def output_layer(inventory: ModelInventory) -> list[SubLayer]:
    """The sub-layers of llama.cpp's output layer: norm and head (a tied head: the embedding).

    A tied model's head is a duplicate of token_embd made in the output layer's
    buffer, so in VRAM it weighs what the embedding weighs; the planner keys it as
    the token embedding, and so does this.
    """
    kinds = {SubLayerKind.OUTPUT_HEAD, SubLayerKind.OUTPUT_NORM}
    if inventory.tied_output:
        kinds.add(SubLayerKind.TOKEN_EMBEDDING)
    return [s for s in inventory.globals if s.kind in kinds]


def _kv(inventory: ModelInventory, keys: Iterable[SubLayerKey], request: PlanRequest) -> int:
    """llama.cpp keeps a layer's KV cache on that layer's device: where its attention is."""
    blocks = {b for b, kind in keys if kind is SubLayerKind.ATTENTION and b is not None}
    return sum(inventory.blocks[b].kv_cache_bytes(request.kv_cells) for b in blocks)


def _weights(inventory: ModelInventory, keys: set[SubLayerKey]) -> int:
    return sum(s.n_bytes for s in inventory.all_sublayers() if sublayer_key(s) in keys)


def projected_bytes(inventory: ModelInventory, request: PlanRequest, keys: set[SubLayerKey]) -> int:
    """Device memory of a placement, as fit.cpp's test loads measure it: model + KV + compute."""
    compute = fixed_vram(inventory, request, LLAMA_CPP_DEFAULT_UBATCH)["compute"]
    return _weights(inventory, keys) + _kv(inventory, keys, request) + compute


def vram_account_of(
    inventory: ModelInventory,
    request: PlanRequest,
    keys: set[SubLayerKey],
    margin_floor: int = MIN_MARGIN_BYTES,
) -> VramAccount:
    """What a placement puts in VRAM at llama.cpp's default n_ubatch, fitting or not."""
    fixed = fixed_vram(inventory, request, LLAMA_CPP_DEFAULT_UBATCH, margin_floor)
    return VramAccount(
        request.vram_budget_bytes,
        _weights(inventory, keys),
        _kv(inventory, keys, request),
        fixed["compute"],
        fixed["margin"],
    )


def fitting_account(
    inventory: ModelInventory, request: PlanRequest, keys: set[SubLayerKey], margin_floor: int
) -> VramAccount | None:
    """The plan's VRAM account, or None when it does not fit the budget."""
    account = vram_account_of(inventory, request, keys, margin_floor)
    return account if account.total_bytes <= request.vram_budget_bytes else None


def costed_placement(
    inventory: ModelInventory,
    profile: Profile,
    request: PlanRequest,
    keys: set[SubLayerKey],
    n_gpu_layers: int,
    reason: str,
) -> Plan:
    """A given resident set as a plan, costed as a llama.cpp user runs it (ubatch 512, op
    offload from 32), with the VRAM account of `vram_account_of`; `n_gpu_layers` counts
    blocks, as a plan does. Raises ValueError when the account exceeds the budget: callers
    that place by hand check `vram_account_of` first to say by how much."""
    account = fitting_account(inventory, request, keys, margin_floor(profile))
    if account is None:
        raise ValueError(f"{reason}: does not fit the budget")
    model = CostModel(profile)
    ordered = tuple(sorted(keys, key=sort_key))
    static = Placement(Where.CPU, {k: Where.GPU for k in ordered})
    streamed = Placement(Where.STREAMED, {k: Where.GPU for k in ordered})
    threads = max(profile.thread_counts or (profile.physical_cores,))
    boundary = LLAMA_CPP_DEFAULT_OFFLOAD_BATCH
    tiers = tuple(
        tier_plan(
            t, family_estimates(inventory, model, static, streamed, t, threads, request), boundary
        )
        for t in request.tiers
    )
    names = tuple(
        n for s in inventory.all_sublayers() if sublayer_key(s) in keys for n in s.tensor_names
    )
    plan = assemble_plan(
        inventory, request, ordered, account, tiers, n_gpu_layers, threads, threads,
        LLAMA_CPP_DEFAULT_UBATCH, boundary, reason, names,
    )  # fmt: skip
    prompt = streamed if boundary <= LLAMA_CPP_DEFAULT_UBATCH else static
    return replace(plan, predicted_ttft_s=chunked_ttft(inventory, model, prompt, threads, plan))


def block_ranges(blocks: list[int]) -> str:
    """[3, 4, 5, 9] -> "3-5, 9"."""
    spans: list[list[int]] = []
    for b in sorted(blocks):
        if spans and b == spans[-1][1] + 1:
            spans[-1][1] = b
        else:
            spans.append([b, b])
    return ", ".join(str(a) if a == z else f"{a}-{z}" for a, z in spans)
