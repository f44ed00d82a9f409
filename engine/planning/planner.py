"""The tiered planner: which sub-layers live in VRAM, and how each token tier runs.

Given a model's inventory, a machine's profile and a VRAM budget, it fills
VRAM in priority order (attention with its KV cache first, then router,
shared experts and output head, then dense FFN and expert banks by benefit
per byte), then costs every token tier under the three families of
DESIGN.md with the cost model:

- GPU-only: sub-layers not resident are streamed over PCIe and run on the GPU;
- static: sub-layers not resident run on the CPU, nothing crosses PCIe;
- dynamic: part streamed while the CPU computes the rest (overlapped).

llama.cpp executes static below a batch-size boundary and GPU-only above it
(op offload, GGML_OP_OFFLOAD_MIN_BATCH), and ShardChat's scheduler patch overlaps
GPU-only's uploads with its compute through staging slots the planner sizes
(engine.planning.prefetch_choice). Dynamic would need the CPU and the GPU to
compute parts of one matrix product at once, which ggml's scheduler (one backend
per node) cannot express, so it is costed and reported but never chosen. The
resident set is filled as a prefix of one fixed priority order, so a bigger budget
always keeps what a smaller one had: more budget never predicts a slower plan. Same inputs, same
plan.

The placements llama.cpp users choose themselves (engine.planning.llama_placements:
whole-layer n_gpu_layers, --n-cpu-moe, --fit) are candidates too, and the plan
chosen never decodes slower than any of them (issue 13). The invariant above then
holds for the best over all candidates as long as each of those families decodes
no slower with more budget (whole layers and --n-cpu-moe only ever add to VRAM;
--fit's steps may reshuffle which blocks keep their experts), so the floor they
set rises with the budget; tests check it over a grid of budgets and contexts.

Working memory is part of the choice (issue 29): every plan runs flash attention
(exact, and it never materialises the attention scores, 2 GiB of a 64-head model
at 16K context and ubatch 512), and one plan is filled per ubatch, below 512 only
where the budget cannot hold the whole model at 512; a smaller ubatch leaves more
room for weights but costs prompts more steps, and the time to first token
decides between them (`_best_of`).
"""

from __future__ import annotations

from dataclasses import replace

from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, SubLayer, SubLayerKind
from engine.planning.cost_model import CostModel, Placement, Where
from engine.planning.plan import (
    NEVER_OFFLOAD,
    Objective,
    Plan,
    PlanRequest,
    VramAccount,
)
from engine.planning.prefetch_choice import (
    STAGED_SLOTS,
    staged_prompts,
    working_memory_beyond,
)
from engine.planning.tier_costing import (
    DEFAULT_UBATCH,
    assemble_plan,
    best_threads,
    chunked_ttft,
    cpu_plan,
    family_estimates,
    margin_floor,
    offload_boundary_of,
    sort_key,
    sublayer_key,
    tier_plan,
)
from engine.planning.vram_account import compute_bytes, staging_bytes
from engine.planning.vram_account import fixed_vram as _fixed_vram

UBATCH_CHOICES = (64, 128, 256, DEFAULT_UBATCH, 1024, 2048, 4096)

_PRIORITY = {
    SubLayerKind.ATTENTION: 0,
    SubLayerKind.MOE_ROUTER: 1,
    SubLayerKind.SHARED_EXPERTS: 2,
    SubLayerKind.OUTPUT_HEAD: 3,
    SubLayerKind.OUTPUT_NORM: 3,
}
_BY_BENEFIT = {SubLayerKind.DENSE_FFN, SubLayerKind.ROUTED_EXPERTS}


def make_plan(inventory: ModelInventory, profile: Profile, request: PlanRequest) -> Plan:
    """The best executable plan for this model, machine and budget."""
    model = CostModel(profile)
    if profile.gpu is None:
        return cpu_plan(inventory, model, request, "no GPU in the profile: CPU-only plan")
    if request.vram_budget_bytes > profile.gpu.vram_total_bytes:
        raise ValueError(
            f"the budget ({request.vram_budget_bytes / 2**30:.1f} GiB) exceeds the GPU's memory "
            f"({profile.gpu.vram_total_bytes / 2**30:.1f} GiB)"
        )
    plans = [
        plan
        for ubatch in _ubatch_choices(inventory, request, profile)
        for slots in (0, STAGED_SLOTS)
        if (plan := _gpu_plan_at(inventory, model, request, ubatch, slots)) is not None
    ]
    if not plans:
        fixed = _fixed_vram(inventory, request, UBATCH_CHOICES[0], margin_floor(profile), True)
        need = sum(fixed.values()) / 2**30
        reason = f"the budget is below the GPU's working memory ({need:.2f} GiB): CPU-only plan"
        return cpu_plan(inventory, model, request, reason)
    return _not_worse_than_llama_cpp(plans, inventory, model, request)


def _not_worse_than_llama_cpp(
    plans: list[Plan], inventory: ModelInventory, model: CostModel, request: PlanRequest
) -> Plan:
    """Our plans against the placements llama.cpp users choose themselves (issue 13).

    Whole-layer n_gpu_layers, --n-cpu-moe and --fit placements join as candidates,
    each as a user runs it (op offload from 32) and run our way (our op-offload
    boundary, threads and prompt family: it is a real plan the engine executes).
    The winner must decode at least as fast as the fastest of them, so by the cost
    model ours never loses; our own plans come first, so they win ties.
    """
    from engine.planning import llama_placements  # it costs its plans with this module's helpers

    rivals = []
    for plan in llama_placements.llama_cpp_baselines(inventory, model.profile, request):
        if plan.resident:  # not the CPU-only fallback: ours has a GPU plan here
            rivals += [plan, run_our_way(plan, inventory, model)]
    floor = max((p.predicted_decode_tokens_per_s for p in rivals), default=0.0)
    best = _best_of([*plans, *rivals], floor)
    if any(best is p for p in plans):
        return best
    best = replace(best, reason=f"{best.reason}: llama.cpp's own placement predicts faster")
    return replace(best, prefetch_reason=best.prefetch_reason or SERIAL_AS_LLAMA_CPP)


def run_our_way(plan: Plan, inventory: ModelInventory, model: CostModel) -> Plan:
    """A llama.cpp placement with our threads, op-offload boundary and prompt family."""
    request = plan.request
    static = Placement(Where.CPU, {k: Where.GPU for k in plan.resident})
    streamed = Placement(Where.STREAMED, {k: Where.GPU for k in plan.resident})
    threads = best_threads(inventory, model, static, 1, request)
    threads_batch = best_threads(inventory, model, static, request.tiers[-1], request)
    if threads == threads_batch == plan.n_threads == plan.n_threads_batch:  # costed already
        estimates = {t.tier: {e.family: e for e in (t.chosen, *t.others)} for t in plan.tiers}
    else:
        estimates = {
            t: family_estimates(
                inventory, model, static, streamed, t, threads if t == 1 else threads_batch,
                request,
            )
            for t in request.tiers
        }  # fmt: skip
    boundary = offload_boundary_of(estimates, request.tiers)
    tiers = tuple(tier_plan(t, estimates[t], boundary) for t in request.tiers)
    ours = replace(
        plan,
        tiers=tiers,
        n_threads=threads,
        n_threads_batch=threads_batch,
        op_offload_min_batch=boundary,
        predicted_decode_tokens_per_s=tiers[0].tokens_per_s,
        reason=f"{plan.reason}, with our op-offload boundary and threads",
        # its account (llama.cpp's placement as a user runs it) keeps no room for staging
        prefetch_reason=SERIAL_AS_LLAMA_CPP,
    )
    return _with_prompt_family(ours, inventory, model, static, streamed, threads_batch)


SERIAL_AS_LLAMA_CPP = "llama.cpp's own placement: weights copied as each split starts"


def _best_of(plans: list[Plan], floor: float = 0.0) -> Plan:
    """The shortest time to first token among plans that keep decode within 5% of the best.

    Plans decoding slower than `floor` never count (decode first); ties go to the
    earliest plan.
    """
    best_decode = max(p.predicted_decode_tokens_per_s for p in plans)
    least = max(0.95 * best_decode, floor)
    good = [p for p in plans if p.predicted_decode_tokens_per_s >= least]
    return min(good, key=lambda p: (round(p.predicted_ttft_s, 9), p.n_ubatch))


# --- GPU ---


def _ubatch_choices(
    inventory: ModelInventory, request: PlanRequest, profile: Profile
) -> tuple[int, ...]:
    """The ubatches worth a plan: up to the prompt, and below 512 only where it saves room.

    A larger ubatch streams non-resident weights once for more tokens (prompts finish
    sooner) but needs a larger compute buffer; below llama.cpp's default of 512 a plan
    pays that in prompt steps, which only a budget too tight for 512 should pay.
    """
    larger = tuple(
        u
        for u in UBATCH_CHOICES
        if u >= DEFAULT_UBATCH and u <= max(request.prompt_tokens, DEFAULT_UBATCH)
    )
    fixed = _fixed_vram(inventory, request, DEFAULT_UBATCH, margin_floor(profile), True)
    room = request.vram_budget_bytes - fixed["compute"] - fixed["margin"]
    if room >= _everything_bytes(inventory, request):
        return larger
    return tuple(u for u in UBATCH_CHOICES if u < DEFAULT_UBATCH) + larger


def _everything_bytes(inventory: ModelInventory, request: PlanRequest) -> int:
    """Every weight a plan can make resident, and the whole KV cache."""
    weights = sum(s.n_bytes for s in inventory.all_sublayers())
    return weights + sum(b.kv_cache_bytes(request.kv_cells) for b in inventory.blocks)


def _gpu_plan_at(
    inventory: ModelInventory, model: CostModel, request: PlanRequest, ubatch: int, slots: int
) -> Plan | None:
    """The plan with this ubatch, flash attention and `slots` staging slots for the weights
    its prompt steps stream, if its working memory fits the budget (and, with slots, if
    anything streams and the overlap pays; engine.planning.prefetch_choice).

    Flash attention is exact (the same attention, computed in tiles) and never needs
    more device memory: it drops the n_ctx x n_ubatch score matrix of every head
    (engine.planning.vram_account), so every GPU plan uses it. A plan that leaves
    weights in host memory may stream them in its prompt steps, whose device copies
    need room too: the room is kept for the largest, before the fill.
    """
    fixed = _fixed_vram(inventory, request, ubatch, margin_floor(model.profile), True)
    room = request.vram_budget_bytes - fixed["compute"] - fixed["margin"]
    if room < _everything_bytes(inventory, request):
        room -= working_memory_beyond(inventory, request, ubatch, slots) - fixed["compute"]
    elif slots:
        return None  # everything fits: nothing streams
    if room <= 0:
        return None
    plan = _gpu_plan(inventory, model, request, fixed, room, ubatch, slots)
    if plan is None:
        return None
    staging = staging_bytes(inventory, _streamed_of(plan, inventory), plan.prefetch_slots)
    vram = replace(plan.vram, compute_bytes=_compute_of(plan, inventory), staging_bytes=staging)
    if vram.total_bytes > request.vram_budget_bytes:
        return None  # the streamed head's slots outgrew what the fill kept (see working memory)
    return replace(plan, vram=vram)


def _streamed_of(plan: Plan, inventory: ModelInventory) -> list[SubLayer]:
    """The weights the plan's full prompt steps stream to the GPU."""
    if plan.op_offload_min_batch > plan.n_ubatch:
        return []
    resident = set(plan.resident)
    return [s for s in inventory.all_sublayers() if (s.block, s.kind) not in resident]


def _compute_of(plan: Plan, inventory: ModelInventory) -> int:
    """The plan's compute buffer, with the copies of the weights its ubatch streams."""
    return compute_bytes(
        inventory,
        plan.request,
        plan.n_ubatch,
        plan.flash_attn,
        _streamed_of(plan, inventory),
        plan.prefetch_slots,
    )


def _gpu_plan(
    inventory: ModelInventory,
    model: CostModel,
    request: PlanRequest,
    fixed: dict[str, int],
    room: int,
    ubatch: int,
    slots: int,
) -> Plan | None:
    """Fill VRAM with a prefix of the priority order; attention brings its block's KV cache."""
    order = _priority_order(inventory, model, request)
    resident: list[SubLayer] = []
    used = kv = 0
    for sub in order:
        cost = sub.n_bytes + _kv_bytes(inventory, sub, request)
        if used + cost > room:
            break  # a prefix of the order: more budget only ever adds
        resident.append(sub)
        used, kv = used + cost, kv + _kv_bytes(inventory, sub, request)
    keys = tuple(sorted((sublayer_key(s) for s in resident), key=sort_key))
    if slots and not keys:
        # nothing resident: every split copies its activations from the CPU too, which the
        # compute estimate counts only through the serial weight copies (lavapipe, MoE at
        # ubatch 256: 10.0 MiB of activations where it predicts 6.0), so it stays serial
        return None
    static = Placement(Where.CPU, {k: Where.GPU for k in keys})
    threads = best_threads(inventory, model, static, 1, request)
    threads_batch = best_threads(inventory, model, static, request.tiers[-1], request)
    serial = Placement(Where.STREAMED, {k: Where.GPU for k in keys})
    off_gpu = [s for s in inventory.all_sublayers() if sublayer_key(s) not in set(keys)]
    prefetch = staged_prompts(inventory, model, ubatch, off_gpu, serial, threads_batch, slots)
    if prefetch is None:
        return None
    streamed = replace(serial, prefetch_slots=prefetch.slots)
    estimates = {
        t: family_estimates(
            inventory, model, static, streamed, t, threads if t == 1 else threads_batch, request
        )
        for t in request.tiers
    }
    everything = len(resident) == len(order)
    boundary = 1 if everything else offload_boundary_of(estimates, request.tiers)
    tiers = tuple(tier_plan(t, estimates[t], boundary) for t in request.tiers)
    account = VramAccount(
        request.vram_budget_bytes, used - kv, kv, fixed["compute"], fixed["margin"]
    )
    gpu_layers = sum(1 for k in keys if k[1] is SubLayerKind.ATTENTION)
    plan = assemble_plan(
        inventory,
        request,
        keys,
        account,
        tiers,
        gpu_layers,
        threads,
        threads_batch,
        ubatch,
        boundary,
        _gpu_reason(len(resident), len(order), boundary),
        tuple(n for s in resident for n in s.tensor_names),
        flash_attn=True,
    )
    plan = replace(plan, prefetch_slots=prefetch.slots, prefetch_reason=prefetch.reason)
    plan = _with_prompt_family(plan, inventory, model, static, streamed, threads_batch)
    if slots and plan.op_offload_min_batch > plan.n_ubatch:
        return None  # its prompt steps run on the CPU: the serial fill is the same, with more room
    return plan


def _with_prompt_family(
    plan: Plan,
    inventory: ModelInventory,
    model: CostModel,
    static: Placement,
    streamed: Placement,
    threads: int,
) -> Plan:
    """Prompt chunks of n_ubatch run static or streamed, whichever is faster at that size.

    Streaming pays for the copy once per chunk, so it can win at the chunk size even
    where it loses at every smaller tier; the op-offload boundary then moves down to
    the chunk size (a threshold: tiers from there on stream too).
    """
    on_cpu = chunked_ttft(inventory, model, static, threads, plan)
    on_gpu = chunked_ttft(inventory, model, streamed, threads, plan)
    if plan.op_offload_min_batch <= plan.n_ubatch or on_cpu <= on_gpu:
        chosen = on_gpu if plan.op_offload_min_batch <= plan.n_ubatch else on_cpu
        return replace(plan, predicted_ttft_s=chosen)
    boundary = plan.n_ubatch
    tiers = tuple(
        tier_plan(t.tier, {e.family: e for e in (t.chosen, *t.others)}, boundary)
        for t in plan.tiers
    )
    return replace(plan, predicted_ttft_s=on_gpu, op_offload_min_batch=boundary, tiers=tiers)


def _kv_bytes(inventory: ModelInventory, sub: SubLayer, request: PlanRequest) -> int:
    """A block whose attention is resident keeps its KV cache in VRAM too (n_gpu_layers)."""
    if sub.kind is not SubLayerKind.ATTENTION or sub.block is None:
        return 0
    return inventory.blocks[sub.block].kv_cache_bytes(request.kv_cells)


def _gpu_reason(n_resident: int, n_total: int, boundary: int) -> str:
    if n_resident == n_total:
        return "the whole model fits the budget"
    rest = "run on the CPU"
    if boundary < NEVER_OFFLOAD:
        rest += f" below {boundary} tokens per step and stream to the GPU from there"
    return f"{n_resident} of {n_total} sub-layers resident in VRAM; the others {rest}"


def _priority_order(
    inventory: ModelInventory, model: CostModel, request: PlanRequest
) -> list[SubLayer]:
    """Fixed-priority kinds by block, then FFN and expert banks by time saved per byte."""
    subs = [s for s in inventory.all_sublayers() if s.kind in _PRIORITY or s.kind in _BY_BENEFIT]
    if inventory.tied_output:  # the head multiplies by the token embedding: it is the head
        subs += [s for s in inventory.globals if s.kind is SubLayerKind.TOKEN_EMBEDDING]
    # llama.cpp offloads the *last* n_gpu_layers blocks, so attention fills from the top.
    fixed = sorted(
        (s for s in subs if _priority(s) is not None),
        key=lambda s: (_priority(s), -(s.block if s.block is not None else -1), s.kind.value),
    )
    tier = 1 if request.objective is Objective.INTERACTIVE else request.n_parallel
    share = inventory.expert_used_count / inventory.expert_count if inventory.is_moe else 1.0
    threads = max(model.profile.thread_counts or (1,))

    def benefit_per_byte(sub: SubLayer) -> float:
        cpu = model.sublayer_cost(sub, Where.CPU, threads, tier, share).seconds
        gpu = model.sublayer_cost(sub, Where.GPU, threads, tier, share).seconds
        return (cpu - gpu) / max(sub.n_bytes, 1)

    ranked = [s for s in subs if s.kind in _BY_BENEFIT and benefit_per_byte(s) > 0]
    ranked.sort(key=lambda s: (-round(benefit_per_byte(s), 18), sort_key(sublayer_key(s))))
    return fixed + ranked


def _priority(sub: SubLayer) -> int | None:
    if sub.kind is SubLayerKind.TOKEN_EMBEDDING:
        return _PRIORITY[SubLayerKind.OUTPUT_HEAD]
    return _PRIORITY.get(sub.kind)
