"""llama.cpp's own --fit (on by default), reproduced: what it picks for a budget, as a plan.

common/fit.cpp of the vendored llama.cpp; tests/gpu checks the reproduction against
the tool itself (engine.planning.fit_tool).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, SubLayerKind
from engine.planning.cost_model import CostModel
from engine.planning.llama_costing import (
    FIT_MARGIN_BYTES,
    NO_CHANGES,
    block_ranges,
    costed_placement,
    fitting_account,
    layer_keys,
    plan_blocks,
    projected_bytes,
)
from engine.planning.plan import Plan, PlanRequest, SubLayerKey
from engine.planning.tier_costing import cpu_plan, margin_floor
from engine.planning.vram_account import MIN_MARGIN_BYTES, margin_bytes


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
        detail += f", experts of blocks {block_ranges(experts_out)} in host memory"
    reason = f"llama.cpp fit: {note}; {detail}"
    if fitting_account(inventory, request, keys, floor) is None:
        return cpu_plan(
            inventory, CostModel(profile), request, f"{reason}: below the GPU's working memory"
        )
    return costed_placement(inventory, profile, request, keys, plan_blocks(layers.n_layer), reason)


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
        return projected_bytes(inventory, request, fit_keys(inventory, layers))

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
    keys = layer_keys(inventory, layers.n_layer)
    first_partial = n + 1 - layers.n_layer + layers.n_full  # il0 after the full layers
    for block in range(max(first_partial, 0), n):  # the last partial layer is the output
        keys.discard((block, SubLayerKind.ROUTED_EXPERTS))
    return keys
