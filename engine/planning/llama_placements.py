"""The placements llama.cpp users choose themselves, as plans our cost model predicts.

Issue 13 asks that the planner never loses to what a llama.cpp user gets without
ShardChat, so those placements are built here as ordinary `Plan`s - the same VRAM
account (engine.planning.vram_account), the same cost model, runnable by
`engine.planning.execution.load_params_for` - and `engine.planning.planner.make_plan` takes
them as candidates:

- `layer_offload_baseline`: whole layers, `-ngl N` with the largest N that fits;
- `n_cpu_moe_baseline`: `-ngl 999 --n-cpu-moe N`, the smallest N that fits (MoE);
- `fit_baseline`: what llama.cpp's own `--fit` (on by default) picks for the budget.

They run as a user runs them: n_ubatch 512 and op offload from llama.cpp's default
batch of 32 (GGML_OP_OFFLOAD_MIN_BATCH unset), with the most threads the profile
measured.

How this llama.cpp counts n_gpu_layers (src/llama-model.cpp of the vendored
llama.cpp in llama-cpp-python 0.3.36, and seen in its load log): the output layer
is one of the n_layer + 1 layers and the first to go, so `-ngl N` puts the output
head and the *last N - 1* blocks on the GPU (`i_gpu_start = n_layer + 1 - N`); the
token embedding (input layer) always stays in host memory. A plan's n_gpu_layers
counts the blocks, as engine.planning.execution reads it (it loads with one more).
"""

from __future__ import annotations

from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, SubLayerKind
from engine.planning.cost_model import CostModel
from engine.planning.llama_costing import (
    USERS_ALL_LAYERS,
    costed_placement,
    fitting_account,
    layer_keys,
    plan_blocks,
)
from engine.planning.llama_fit import fit_baseline
from engine.planning.plan import Plan, PlanRequest, SubLayerKey
from engine.planning.tier_costing import cpu_plan, margin_floor

# --- n_gpu_layers ---


def layer_offload_baseline(
    inventory: ModelInventory, profile: Profile, request: PlanRequest
) -> Plan:
    """`-ngl N`: the output layer and the last N - 1 blocks (with their KV cache) in VRAM.

    N is the largest whose VRAM account fits the budget: what a user who tunes
    n_gpu_layers by hand ends up with. Below the GPU's working memory, or without a
    GPU, the CPU-only plan.
    """
    if profile.gpu is None or not inventory.blocks:
        return cpu_plan(inventory, CostModel(profile), request, "no GPU: CPU only")
    n, floor = len(inventory.blocks), margin_floor(profile)
    best = None
    for layers in range(n + 2):  # memory grows with every layer: stop at the first misfit
        if fitting_account(inventory, request, layer_keys(inventory, layers), floor) is None:
            break
        best = layers
    if best is None:
        return cpu_plan(
            inventory, CostModel(profile), request, "below the GPU's working memory: CPU only"
        )
    which = {0: "none", n + 1: "all of them"}.get(
        best, f"the output layer and the last {best - 1} of {n} blocks"
    )
    reason = f"n_gpu_layers={best} of {n + 1} (whole layers: {which})"
    keys = layer_keys(inventory, best)
    return costed_placement(inventory, profile, request, keys, plan_blocks(best), reason)


# --- --n-cpu-moe ---


def n_cpu_moe_baseline(
    inventory: ModelInventory, profile: Profile, request: PlanRequest
) -> Plan | None:
    """`-ngl 999 --n-cpu-moe N`: every layer in VRAM but the expert banks of the first N blocks.

    llama.cpp's --n-cpu-moe N overrides `blk.i.ffn_(up|down|gate|gate_up)_(ch|)exps`
    to the CPU for i < N (common/arg.cpp, llm_add_n_cpu_ffn_overrides). N is the
    smallest whose account fits: the fewest experts in host memory. None for a
    dense model, without a GPU, or when even N = n_layer does not fit (the user
    would have to lower n_gpu_layers as well, which the whole-layer and fit
    baselines cover).
    """
    if not inventory.is_moe or profile.gpu is None or not inventory.blocks:
        return None
    n, floor = len(inventory.blocks), margin_floor(profile)
    for n_cpu in range(n + 1):
        keys = n_cpu_moe_keys(inventory, n_cpu)
        if fitting_account(inventory, request, keys, floor) is not None:
            reason = (
                f"n_cpu_moe={n_cpu} (experts of the first {n_cpu} blocks in host memory, "
                f"n_gpu_layers={USERS_ALL_LAYERS})"
            )
            return costed_placement(inventory, profile, request, keys, n, reason)
    return None


def n_cpu_moe_keys(inventory: ModelInventory, n_cpu: int) -> set[SubLayerKey]:
    """Every layer resident except the routed experts of blocks below n_cpu."""
    keys = layer_keys(inventory, len(inventory.blocks) + 1)
    return {
        k
        for k in keys
        if not (k[1] is SubLayerKind.ROUTED_EXPERTS and k[0] is not None and k[0] < n_cpu)
    }


def llama_cpp_baselines(
    inventory: ModelInventory, profile: Profile, request: PlanRequest
) -> list[Plan]:
    """Every llama.cpp placement that applies to this model and budget."""
    plans = [
        layer_offload_baseline(inventory, profile, request),
        n_cpu_moe_baseline(inventory, profile, request),
        fit_baseline(inventory, profile, request),
    ]
    return [p for p in plans if p is not None]
