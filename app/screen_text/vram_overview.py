"""What the VRAM panel shows, as one plain value built from the plan and a GPU reading.

The panel only renders a `VramOverview`; everything it says (how the budget is
spent, what the plan predicts for a chat and for a batch, what the GPU holds
right now, how a placement chosen by hand compares with the planner's) is decided
here, where it can be tested without a window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

from app.screen_text.plan_words import correction_words, plan_details, predicted_decode_tps
from app.screen_text.profile_summary import backend_text
from app.screen_text.units import format_bytes, speed_text
from engine.machine.calibration import CPU_KIND, kind_error
from engine.machine.hardware_info import GpuInfo
from engine.planning.plan import Plan
from engine.planning.step_correction import Correction

BATCH_SEQUENCES = 16  # the batch figure: this many sequences decoding side by side
NO_PLAN = "no plan: this machine is not profiled yet (Tools → Profile this machine)"


@dataclass(frozen=True)
class VramSegment:
    """One stretch of the stacked bar."""

    label: str
    n_bytes: int


@dataclass(frozen=True)
class VramOverview:
    gpu_name: str | None  # None: no usable GPU, and `no_gpu_reason` says why
    no_gpu_reason: str
    vram_total_bytes: int
    budget_bytes: int
    auto: bool
    resident: tuple[VramSegment, ...]  # weights, KV cache, compute buffers, margin
    # Live, from the driver; None without a GPU, or where the backend cannot say
    # whose the used memory is (ggml's Vulkan or Metal figures): then see gpu_used_bytes.
    shardchat_used_bytes: int | None
    others_used_bytes: int | None
    family: str  # how a chat's decode runs under the plan, in words
    chat_ttft_s: float | None
    chat_tokens_per_s: float | None
    batch_tokens_per_s: float | None
    backend: str | None = None  # llama.cpp backend and device, e.g. "Vulkan (Vulkan0)"
    integrated: bool = False  # the "VRAM" is system RAM shared with the CPU
    gpu_used_bytes: int | None = None  # everyone's use, ShardChat's included
    # Who places the weights (issue 13): the plan's placement, "auto", "cpu", "layers:N"
    # or "cpu-moe:N"; the model's blocks and whether it has experts, for the choices the
    # panel offers (None: unknown until the worker re-planned, since a loaded plan does
    # not record them); the two predictions, in words.
    placement: str = "auto"
    n_layer: int | None = None
    is_moe: bool | None = None
    placement_comparison: str = ""
    # What sits where, in plain words (app.screen_text.plan_words): the GPU, the CPU, PCIe,
    # the KV cache.
    plan_details: tuple[str, ...] = ()
    # The batch row: BATCH_SEQUENCES side by side, or the local API server's slots while
    # it serves, since those are the sequences that then decode together.
    batch_label: str = f"Batch ({BATCH_SEQUENCES})"
    # How the chat figure was corrected by what the model's steps taught the cost model
    # (app.screen_text.plan_words.correction_words: "corrected from 31 after 400 steps");
    # empty: not yet.
    chat_correction: str = ""

    @property
    def has_gpu(self) -> bool:
        return self.gpu_name is not None

    @property
    def has_plan(self) -> bool:
        return bool(self.resident)

    @property
    def planned_bytes(self) -> int:
        return sum(segment.n_bytes for segment in self.resident)


def vram_overview(
    plan: Plan | None,
    gpu: GpuInfo | None,
    no_gpu_reason: str = "",
    auto: bool = False,
    budget_bytes: int | None = None,
    planner_plan: Plan | None = None,
    api_slots: int | None = None,
    correction: Correction | None = None,
) -> VramOverview:
    """The panel's figures; `budget_bytes` overrides the plan's while a new one is applied.

    `planner_plan` is what the planner would choose at this budget when `plan` is a
    placement chosen by hand (the worker plans it: the GUI thread never does).
    `api_slots`: the local API server's slots while it serves; the batch row predicts them.
    `correction`: what the chat's decode steps taught the cost model (the last reply's).
    """
    budget = budget_bytes if budget_bytes is not None else _plan_budget(plan)
    extras = plan.extras if plan else {}
    return VramOverview(
        gpu_name=gpu.name if gpu else None,
        no_gpu_reason=no_gpu_reason or "no GPU found",
        vram_total_bytes=gpu.vram_total_bytes if gpu else 0,
        budget_bytes=budget,
        auto=auto,
        resident=_resident(plan),
        shardchat_used_bytes=_shardchat_bytes(gpu),
        others_used_bytes=gpu.other_processes_bytes if _knows_others(gpu) else None,
        family=_family(plan),
        chat_ttft_s=plan.predicted_ttft_s if plan else None,
        chat_tokens_per_s=predicted_decode_tps(plan, correction),  # as it runs, corrected
        batch_tokens_per_s=_batch_tokens_per_s(plan, api_slots or BATCH_SEQUENCES),
        backend=backend_text(gpu.backend, gpu.ggml_device) if gpu else None,
        integrated=gpu.integrated if gpu else False,
        gpu_used_bytes=gpu.vram_used_bytes if gpu else None,
        placement=str(extras.get("placement") or "auto"),
        n_layer=int(extras["n_layer"]) if "n_layer" in extras else None,
        is_moe=bool(extras["is_moe"]) if "is_moe" in extras else None,
        placement_comparison=_comparison(plan, planner_plan),
        plan_details=tuple(plan_details(plan)),
        batch_label=_batch_label(api_slots),
        chat_correction=correction_words(plan, correction) or _spread(plan, gpu),
    )


def _spread(plan: Plan | None, gpu: GpuInfo | None) -> str:
    """Before the steps corrected it, how sure the prediction is: "±10 % on CUDA machines",
    the calibration table's error for the kind of machine that runs the plan."""
    if plan is None:
        return ""
    kind = gpu.backend if gpu is not None and plan.vram.total_bytes > 0 else CPU_KIND
    return f"±{kind_error(kind):.0%} on {'CPU-only' if kind == CPU_KIND else kind} machines"


def _prediction(plan: Plan) -> str:
    """Decode speed, time to first token and VRAM used: "30.9 tok/s, 0.39 s, 3.9 GiB"."""
    return (
        f"{speed_text(plan.predicted_decode_tokens_per_s)}, {plan.predicted_ttft_s:.2f} s, "
        f"{format_bytes(plan.vram.total_bytes)}"
    )


def _comparison(plan: Plan | None, planner_plan: Plan | None) -> str:
    """The planner's prediction beside the user's, so a manual placement's cost is plain."""
    if plan is None:
        return ""
    extras = plan.extras
    placement = str(extras.get("placement") or "auto")
    if placement == "auto":
        text = f"planner: {_prediction(plan)}"
        wanted = extras.get("requested_placement")
        return f"{text} · yours ({wanted}): does not fit this budget" if wanted else text
    yours = f"yours ({placement}): {_prediction(plan)}"
    return yours if planner_plan is None else f"planner: {_prediction(planner_plan)} · {yours}"


def _plan_budget(plan: Plan | None) -> int:
    return plan.vram.budget_bytes if plan else 0


def _resident(plan: Plan | None) -> tuple[VramSegment, ...]:
    if plan is None:
        return ()
    vram = plan.vram
    staging = (
        (VramSegment(f"{plan.prefetch_slots} upload slots", vram.staging_bytes),)
        if vram.staging_bytes
        else ()
    )
    return (
        VramSegment("weights", vram.weights_bytes),
        VramSegment("KV cache", vram.kv_cache_bytes),
        VramSegment("compute buffers", vram.compute_bytes - vram.staging_bytes),
        *staging,
        VramSegment("margin", vram.margin_bytes),
    )


def _knows_others(gpu: GpuInfo | None) -> TypeGuard[GpuInfo]:
    return gpu is not None and gpu.other_processes_known


def _shardchat_bytes(gpu: GpuInfo | None) -> int | None:
    """What the driver counts as used, less what other processes hold: ours and the driver's."""
    if gpu is None or not _knows_others(gpu):
        return None
    return max(0, gpu.vram_used_bytes - gpu.other_processes_bytes)


def _family(plan: Plan | None) -> str:
    if plan is None:
        return NO_PLAN
    return plan.family_for(1).value.replace("_", " ")


def _batch_tokens_per_s(plan: Plan | None, n_sequences: int) -> float | None:
    """Aggregate decode speed of n sequences decoding together: the tier that holds them."""
    if plan is None:
        return None
    tier = plan.tier_for(n_sequences)
    return next(t.tokens_per_s for t in plan.tiers if t.tier == tier)


def _batch_label(api_slots: int | None) -> str:
    if api_slots is None:
        return f"Batch ({BATCH_SEQUENCES})"
    return f"API ({api_slots} slot{'' if api_slots == 1 else 's'})"
