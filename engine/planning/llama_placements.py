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

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from enum import Enum

from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, SubLayer, SubLayerKind
from engine.planning.cost_model import CostModel, Placement, Where
from engine.planning.plan import Plan, PlanRequest, SubLayerKey, VramAccount
from engine.planning.tier_costing import (
    assemble_plan,
    chunked_ttft,
    cpu_plan,
    family_estimates,
    margin_floor,
    sort_key,
    sublayer_key,
    tier_plan,
)
from engine.planning.vram_account import MIB, MIN_MARGIN_BYTES, fixed_vram, margin_bytes

LLAMA_CPP_DEFAULT_OFFLOAD_BATCH = 32  # GGML_OP_OFFLOAD_MIN_BATCH when unset
LLAMA_CPP_DEFAULT_UBATCH = 512
FIT_MARGIN_BYTES = 1024 * MIB  # --fit-target default (common_params::fit_params_target)
USERS_ALL_LAYERS = 999  # `-ngl 999`: every layer, whatever the model's depth
NO_CHANGES = "no changes needed"


def plan_blocks(n_gpu_layers: int) -> int:
    """A plan's n_gpu_layers (blocks) for llama.cpp's (the output layer and blocks)."""
    return max(n_gpu_layers - 1, 0)


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
        if _account(inventory, request, _layer_keys(inventory, layers), floor) is None:
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
    keys = _layer_keys(inventory, best)
    return _costed(inventory, profile, request, keys, plan_blocks(best), reason)


def layer_keys(inventory: ModelInventory, n_gpu_layers: int) -> set[SubLayerKey]:
    """What `-ngl n_gpu_layers` puts in VRAM (llama.cpp's counting: the output layer and
    the last n_gpu_layers - 1 blocks), for a user's own choice of N (issue 13)."""
    return _layer_keys(inventory, n_gpu_layers)


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
    return _costed(inventory, profile, request, keys, n_gpu_layers, reason)


def _layer_keys(inventory: ModelInventory, n_gpu_layers: int) -> set[SubLayerKey]:
    """What `-ngl n_gpu_layers` puts in VRAM, in this llama.cpp's counting."""
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
        if _account(inventory, request, keys, floor) is not None:
            reason = (
                f"n_cpu_moe={n_cpu} (experts of the first {n_cpu} blocks in host memory, "
                f"n_gpu_layers={USERS_ALL_LAYERS})"
            )
            return _costed(inventory, profile, request, keys, n, reason)
    return None


def n_cpu_moe_keys(inventory: ModelInventory, n_cpu: int) -> set[SubLayerKey]:
    """Every layer resident except the routed experts of blocks below n_cpu."""
    keys = _layer_keys(inventory, len(inventory.blocks) + 1)
    return {
        k
        for k in keys
        if not (k[1] is SubLayerKind.ROUTED_EXPERTS and k[0] is not None and k[0] < n_cpu)
    }


# --- --fit ---


class LayerFraction(int, Enum):
    """common_layer_fraction_t: which part of a layer overflows to host memory."""

    NONE = 0
    ATTN = 1  # every ffn tensor overflows, attention stays
    UP = 2  # attention and ffn_up stay
    GATE = 3  # attention, ffn_up and ffn_gate stay
    MOE = 4  # everything but the sparse expert tensors stays


@dataclass(frozen=True)
class FitLayers:
    """fit.cpp's ngl_t for the one GPU: layers given to it, and how many of them overflow."""

    n_layer: int = 0  # llama.cpp's n_gpu_layers (the output layer counts as one)
    n_part: int = 0  # of those, layers whose expert tensors go to host memory
    overflow: LayerFraction = LayerFraction.MOE  # of the first partial layer

    @property
    def n_full(self) -> int:
        return self.n_layer - self.n_part


def fit_baseline(inventory: ModelInventory, profile: Profile, request: PlanRequest) -> Plan:
    """What llama.cpp's `--fit on` (the default) chooses when the budget is the free VRAM.

    A Python reproduction of `common_params_fit_impl` (common/fit.cpp of the
    llama.cpp vendored in llama-cpp-python 0.3.36) for one GPU, with our VRAM
    account - resident weights + KV cache of the layers on the GPU + compute
    buffers for n_ubatch 512 - as the memory projection that fit.cpp gets from
    no-alloc test loads. Its target is free memory minus the margin, 1 GiB
    (--fit-target); where our own margin is larger (budgets above 20 GiB) ours, so the
    plan never takes VRAM the planner itself keeps free.

    Reproduced, in order:
    1. with the parameters as given (every layer on the GPU) a projection that meets
       the target changes nothing;
    3. layers are filled back to front by the method of false position on
       n_gpu_layers (`delta * (target - mem_low) / (mem_high - mem_low)`, clamped to
       [1, delta - 1], with its unsigned wrap when the low bound does not fit); for an
       MoE model these are "dense-only" layers (n_part of them with their expert
       tensors in host memory, the first step keeping one layer full);
    4. for an MoE model whose dense weights all fit (projection with every expert in
       host memory under the target), the partial layers are converted to full ones
       front to back, by the same false-position search on the number of full layers;
    and `set_ngl_tensor_split_tbo`'s mapping of (n_layer, n_part) to tensors, as
    written: the first n_full offloaded layers (lowest indices) are full, and the
    n_part layers above them overflow, the last of them being the output layer,
    whose pattern matches no tensor - so n_part - 1 blocks keep their experts in
    host memory, and with n_full = 1 the lowest offloaded block is the full one,
    not the output layer the comments mean.

    Not reproduced: step 2, cutting the context (fit does it only when n_ctx is 0,
    and ShardChat always sets n_ctx); multi-GPU splits and the extra (draft) model;
    and step 4's last refinement, which tries one partial layer with only part of
    its FFN in host memory (LAYER_FRACTION_UP/GATE, else ATTN) - a split inside a
    block's expert bank that a plan, placed by whole sub-layers, cannot hold; the
    first partial layer stays LAYER_FRACTION_MOE here, so llama.cpp may hold up to
    two thirds of one more block's experts in VRAM than this plan. Tensors named
    `ffn_*_chexps` (our inventory counts them as shared experts) stay with the layer.

    Checked against llama.cpp's own fit (tests/gpu/test_fit_params.py, `llama-fit-params`
    built from the vendored fit.cpp, on lavapipe): given llama.cpp's no-alloc memory for
    each placement it tries, the same n_gpu_layers and host-expert blocks at every
    budget of the sweep. With our account as the memory instead, a budget near a layer
    boundary can get one layer more than llama.cpp gives: its compute buffer grows by a
    copy of the op-offloaded host weights, which the account leaves out.
    """
    if profile.gpu is None or not inventory.blocks:
        return cpu_plan(inventory, CostModel(profile), request, "no GPU: CPU only")
    floor = margin_floor(profile)
    layers, note = fit_layers(inventory, request, floor)
    n = len(inventory.blocks)
    keys = fit_keys(inventory, layers)
    experts_out = [
        b.index
        for b in inventory.blocks
        if (b.index, SubLayerKind.ATTENTION) in keys
        and b.sublayer(SubLayerKind.ROUTED_EXPERTS) is not None
        and (b.index, SubLayerKind.ROUTED_EXPERTS) not in keys
    ]
    shown = -1 if note == NO_CHANGES else layers.n_layer  # step 1 leaves the default
    detail = f"n_gpu_layers={shown} of {n + 1}"
    if experts_out:
        detail += f", experts of blocks {_ranges(experts_out)} in host memory"
    reason = f"llama.cpp fit: {note}; {detail}"
    if _account(inventory, request, keys, floor) is None:
        return cpu_plan(
            inventory, CostModel(profile), request, f"{reason}: below the GPU's working memory"
        )
    return _costed(inventory, profile, request, keys, plan_blocks(layers.n_layer), reason)


def fit_layers(
    inventory: ModelInventory, request: PlanRequest, margin_floor: int = MIN_MARGIN_BYTES
) -> tuple[FitLayers, str]:
    """fit.cpp's decision for one GPU: (n_layer, n_part), and which step settled it."""
    budget = request.vram_budget_bytes
    target = budget - max(FIT_MARGIN_BYTES, margin_bytes(budget, margin_floor))
    return fit_layers_to(inventory, request, target)


def fit_layers_to(
    inventory: ModelInventory,
    request: PlanRequest,
    target: int,
    memory: Callable[[FitLayers], int] | None = None,
) -> tuple[FitLayers, str]:
    """fit.cpp's decision when `target` bytes of device memory may be used (free - margin).

    `memory` is the device memory of a placement: our VRAM account unless given; the
    GPU tier passes llama.cpp's own no-alloc measurement, as fit.cpp takes, to check
    the algorithm against the real tool apart from the account.
    """
    n = len(inventory.blocks)

    def projected(layers: FitLayers) -> int:
        return _projected(inventory, request, fit_keys(inventory, layers))

    mem = memory or projected
    everything = FitLayers(n + 1, 0)
    if mem(everything) <= target:  # step 1
        return everything, NO_CHANGES
    moe = inventory.is_moe
    # every expert tensor in host memory, the rest on the GPU
    surplus_cpu_moe = target - mem(FitLayers(n + 1, n + 1)) if moe else 0

    # step 3: fill layers back to front ("dense-only" ones for an MoE model)
    low, mem_low = FitLayers(), mem(FitLayers())
    high = FitLayers(n + 1, n if moe else 0)
    mem_high = mem(high)
    if mem_high <= target:
        low, mem_low = high, mem_high
    else:
        delta = high.n_layer - low.n_layer
        while delta > 1:
            step = _false_position_step(delta, target, mem_low, mem_high)
            part = low.n_part
            if moe:
                part += step - 1 if low.n_part == 0 else step
            test = FitLayers(low.n_layer + step, part)
            mem_test = mem(test)
            if mem_test <= target:
                low, mem_low = test, mem_test
            else:
                high, mem_high = test, mem_test
            delta = high.n_layer - low.n_layer
    if not moe or surplus_cpu_moe <= 0 or low.n_layer == 0:
        what = "dense layers" if not moe else "dense-only layers (experts in host memory)"
        return low, f"filled {what} back to front"

    # step 4: convert the dense-only layers to full ones, front to back
    high = FitLayers(low.n_layer, 0)
    mem_high = mem(high)
    if mem_high <= target:
        return high, "every dense weight fits; converted all layers to full ones"
    delta = high.n_full - low.n_full
    while delta > 1:
        step = _false_position_step(delta, target, mem_low, mem_high)
        test = FitLayers(low.n_layer, low.n_part - min(step, low.n_part))
        mem_test = mem(test)
        if mem_test <= target:
            low, mem_low = test, mem_test
        else:
            high, mem_high = test, mem_test
        delta = high.n_full - low.n_full
    return low, "every dense weight fits; converted layers to full ones front to back"


def _false_position_step(delta: int, target: int, mem_low: int, mem_high: int) -> int:
    """fit.cpp's step: int64 arithmetic truncated toward zero, stored in a uint32, clamped."""
    span = mem_high - mem_low
    if span <= 0:  # fit.cpp would divide by zero; no real model gets here
        return delta - 1
    numerator = delta * (target - mem_low)
    quotient = abs(numerator) // span * (1 if numerator >= 0 else -1)
    step = quotient % (1 << 32)  # a negative step wraps to a huge unsigned one
    return min(max(step, 1), delta - 1)


def fit_keys(inventory: ModelInventory, layers: FitLayers) -> set[SubLayerKey]:
    """What fit's (n_layer, n_part) puts in VRAM: set_ngl_tensor_split_tbo, one device."""
    n = len(inventory.blocks)
    keys = _layer_keys(inventory, layers.n_layer)
    first_partial = n + 1 - layers.n_layer + layers.n_full  # il0 after the full layers
    for block in range(max(first_partial, 0), n):  # the last partial layer is the output
        keys.discard((block, SubLayerKind.ROUTED_EXPERTS))
    return keys


# --- shared ---


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


def _kv(inventory: ModelInventory, keys: Iterable[SubLayerKey], request: PlanRequest) -> int:
    """llama.cpp keeps a layer's KV cache on that layer's device: where its attention is."""
    blocks = {b for b, kind in keys if kind is SubLayerKind.ATTENTION and b is not None}
    return sum(inventory.blocks[b].kv_cache_bytes(request.n_ctx) for b in blocks)


def _weights(inventory: ModelInventory, keys: set[SubLayerKey]) -> int:
    return sum(s.n_bytes for s in inventory.all_sublayers() if sublayer_key(s) in keys)


def _projected(inventory: ModelInventory, request: PlanRequest, keys: set[SubLayerKey]) -> int:
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


def _account(
    inventory: ModelInventory, request: PlanRequest, keys: set[SubLayerKey], margin_floor: int
) -> VramAccount | None:
    """The plan's VRAM account, or None when it does not fit the budget."""
    account = vram_account_of(inventory, request, keys, margin_floor)
    return account if account.total_bytes <= request.vram_budget_bytes else None


def _costed(
    inventory: ModelInventory,
    profile: Profile,
    request: PlanRequest,
    keys: set[SubLayerKey],
    n_gpu_layers: int,
    reason: str,
) -> Plan:
    """The placement costed as a llama.cpp user runs it: ubatch 512, op offload from 32."""
    account = _account(inventory, request, keys, margin_floor(profile))
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


def _ranges(blocks: list[int]) -> str:
    """[3, 4, 5, 9] -> "3-5, 9"."""
    spans: list[list[int]] = []
    for b in sorted(blocks):
        if spans and b == spans[-1][1] + 1:
            spans[-1][1] = b
        else:
            spans.append([b, b])
    return ", ".join(str(a) if a == z else f"{a}-{z}" for a, z in spans)
