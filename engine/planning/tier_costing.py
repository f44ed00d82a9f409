"""Costing a resident set tier by tier, and assembling the result into a `Plan`.

The planner (engine.planning.planner) and llama.cpp's own placements
(engine.planning.llama_placements)
turn a placement into a plan the same way: each token tier costed under the static,
GPU-only and dynamic families with the cost model, the op-offload boundary at the
first tier where streaming wins, threads chosen by prediction, the time to first
token over n_ubatch chunks. Those steps live here, so that neither module reaches
into the other's private helpers.
"""

from __future__ import annotations

from dataclasses import replace

from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, SubLayer, SubLayerKind
from engine.planning.cost_model import CostModel, Placement, StepPrediction, Where
from engine.planning.plan import (
    EXECUTABLE_FAMILIES,
    NEVER_OFFLOAD,
    FamilyEstimate,
    Plan,
    PlanFamily,
    PlanRequest,
    SubLayerKey,
    TierPlan,
    VramAccount,
)
from engine.planning.vram_account import MIN_MARGIN_BYTES

DEFAULT_UBATCH = 512  # llama.cpp's n_ubatch default, and the CPU plan's


def margin_floor(profile: Profile) -> int:
    return profile.gpu.margin_floor_bytes if profile.gpu else MIN_MARGIN_BYTES


def cpu_plan(
    inventory: ModelInventory, model: CostModel, request: PlanRequest, reason: str
) -> Plan:
    placement = Placement()
    threads = best_threads(inventory, model, placement, 1, request)
    threads_batch = best_threads(inventory, model, placement, request.tiers[-1], request)
    tiers = tuple(
        TierPlan(
            t,
            estimate_family(
                inventory, model, placement, PlanFamily.CPU_ONLY, t,
                threads if t == 1 else threads_batch, request,
            ),
            (),
        )
        for t in request.tiers
    )  # fmt: skip
    account = VramAccount(request.vram_budget_bytes, 0, 0, 0, 0)
    plan = assemble_plan(
        inventory, request, (), account, tiers, 0, threads, threads_batch, DEFAULT_UBATCH,
        NEVER_OFFLOAD, reason, flash_attn=True,  # faster on the CPU, as measured (load_params)
    )  # fmt: skip
    ttft = chunked_ttft(inventory, model, placement, threads_batch, plan)
    return replace(plan, predicted_ttft_s=ttft)


def chunked_ttft(
    inventory: ModelInventory, model: CostModel, placement: Placement, threads: int, plan: Plan
) -> float:
    """The prompt in n_ubatch chunks: each chunk is one step (and streams the weights once).

    So a smaller ubatch, which a tight budget may need for its smaller compute buffer,
    costs prompts more steps, and a streamed placement copies its weights once per step.
    """
    request = plan.request
    full, rest = divmod(request.prompt_tokens, plan.n_ubatch)
    past = costed_past(request)
    seconds = (
        full * model.predict_step(inventory, plan.n_ubatch, threads, 1, past, placement).seconds
    )
    if rest:
        seconds += model.predict_step(inventory, rest, threads, 1, past, placement).seconds
    return seconds


def family_estimates(
    inventory: ModelInventory,
    model: CostModel,
    static: Placement,
    streamed: Placement,
    tier: int,
    threads: int,
    request: PlanRequest,
) -> dict[PlanFamily, FamilyEstimate]:
    """Static, GPU-only and dynamic costs of one tier under one resident set."""
    outputs, past = costed_outputs(tier, request), costed_past(request)
    on_cpu = model.predict_step(inventory, tier, threads, outputs, past, static)
    on_gpu = model.predict_step(inventory, tier, threads, outputs, past, streamed)
    streamed_bytes = bytes_streamed(inventory, streamed)
    return {
        PlanFamily.STATIC: FamilyEstimate(PlanFamily.STATIC, on_cpu.seconds, 0, True),
        PlanFamily.GPU_ONLY: FamilyEstimate(
            PlanFamily.GPU_ONLY, on_gpu.seconds, streamed_bytes, True
        ),
        PlanFamily.DYNAMIC: _dynamic(on_cpu, on_gpu, streamed_bytes),
    }


def _dynamic(on_cpu: StepPrediction, on_gpu: StepPrediction, streamed_bytes: int) -> FamilyEstimate:
    """Overlap: split the non-resident work so the CPU and copy-then-GPU finish together."""
    cpu_part = on_cpu.by_device.get(Where.CPU, 0.0)
    copy_part = on_gpu.by_device.get(Where.STREAMED, 0.0)
    common = on_cpu.seconds - cpu_part
    if cpu_part <= 0 or copy_part <= 0:
        return FamilyEstimate(PlanFamily.DYNAMIC, on_cpu.seconds, 0, False)
    overlapped = cpu_part * copy_part / (cpu_part + copy_part)
    share_streamed = cpu_part / (cpu_part + copy_part)
    seconds = common + overlapped
    return FamilyEstimate(PlanFamily.DYNAMIC, seconds, int(streamed_bytes * share_streamed), False)


def offload_boundary_of(
    estimates: dict[int, dict[PlanFamily, FamilyEstimate]], tiers: tuple[int, ...]
) -> int:
    """The first tier from which streaming beats the CPU: llama.cpp's op-offload batch size."""
    for tier in tiers:
        family = estimates[tier]
        if family[PlanFamily.GPU_ONLY].seconds < family[PlanFamily.STATIC].seconds:
            return tier
    return NEVER_OFFLOAD


def tier_plan(tier: int, families: dict[PlanFamily, FamilyEstimate], boundary: int) -> TierPlan:
    chosen_family = PlanFamily.GPU_ONLY if tier >= boundary else PlanFamily.STATIC
    chosen = families[chosen_family]
    others = tuple(e for f, e in sorted(families.items()) if f is not chosen_family)
    return TierPlan(tier, chosen, others)


def estimate_family(
    inventory: ModelInventory,
    model: CostModel,
    placement: Placement,
    family: PlanFamily,
    tier: int,
    threads: int,
    request: PlanRequest,
) -> FamilyEstimate:
    outputs, past = costed_outputs(tier, request), costed_past(request)
    step = model.predict_step(inventory, tier, threads, outputs, past, placement)
    streamed = bytes_streamed(inventory, placement)
    return FamilyEstimate(family, step.seconds, streamed, family in EXECUTABLE_FAMILIES)


def bytes_streamed(inventory: ModelInventory, placement: Placement) -> int:
    return sum(
        s.n_bytes
        for s in inventory.all_sublayers()
        if placement.where(s) is Where.STREAMED and s.kind is not SubLayerKind.TOKEN_EMBEDDING
    )


def costed_past(request: PlanRequest) -> int:
    """Steps are costed in the middle of a prompt's worth of context."""
    return min(request.prompt_tokens, request.n_ctx) // 2


def costed_outputs(tier: int, request: PlanRequest) -> int:
    """Decode tiers want logits for every token; a prompt chunk only for its last."""
    return tier if tier <= max(request.n_parallel, 1) else 1


def best_threads(
    inventory: ModelInventory,
    model: CostModel,
    placement: Placement,
    tier: int,
    request: PlanRequest,
) -> int:
    counts = model.profile.thread_counts or (model.profile.physical_cores,)
    return min(
        counts,
        key=lambda t: (
            round(
                model.predict_step(
                    inventory,
                    tier,
                    t,
                    costed_outputs(tier, request),
                    costed_past(request),
                    placement,
                ).seconds,
                12,
            ),
            t,
        ),
    )


def assemble_plan(
    inventory: ModelInventory,
    request: PlanRequest,
    keys: tuple[SubLayerKey, ...],
    account: VramAccount,
    tiers: tuple[TierPlan, ...],
    n_gpu_layers: int,
    threads: int,
    threads_batch: int,
    n_ubatch: int,
    boundary: int,
    reason: str,
    names: tuple[str, ...] = (),
    flash_attn: bool = False,
) -> Plan:
    """The plan of a costed placement; `flash_attn` as its VRAM account assumed it.

    llama.cpp's own placements are accounted as a user runs them, without flash attention.
    """
    by_tier = {t.tier: t for t in tiers}
    decode = by_tier[request.tiers[0]]
    return Plan(
        model_name=inventory.name,
        request=request,
        resident=keys,
        resident_tensor_names=names,
        vram=account,
        tiers=tiers,
        n_gpu_layers=n_gpu_layers,
        n_threads=threads,
        n_threads_batch=threads_batch,
        n_ubatch=n_ubatch,
        op_offload_min_batch=boundary,
        reason=reason,
        predicted_ttft_s=0.0,  # set by the caller, which knows how prompts run
        predicted_decode_tokens_per_s=decode.tokens_per_s,
        flash_attn=flash_attn,
    )


def sublayer_key(sub: SubLayer) -> SubLayerKey:
    return (sub.block, sub.kind)


def sort_key(key: SubLayerKey) -> tuple[int, str]:
    block, kind = key
    return (-1 if block is None else block, kind.value)


def with_offload_boundary(plan: Plan, boundary: int) -> Plan:
    """The same placement with llama.cpp streaming from `boundary` tokens per step.

    Every tier's families are already costed; only which one runs changes.
    """
    tiers = tuple(
        tier_plan(t.tier, {e.family: e for e in (t.chosen, *t.others)}, boundary)
        for t in plan.tiers
    )
    return replace(
        plan,
        tiers=tiers,
        op_offload_min_batch=boundary,
        predicted_decode_tokens_per_s=tiers[0].tokens_per_s,
    )
