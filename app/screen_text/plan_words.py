"""A plan in plain words: what sits on the GPU, what the CPU computes, what crosses PCIe.

The status bar and the VRAM panel speak to people who never read DESIGN.md, so
"static decode" has to become "GPU: 24 of 32 layers + KV cache · CPU: 8 layers".
Everything said here is read off the plan's own structure (its resident
sub-layers, its VRAM account, how its batch-of-1 tier runs), never guessed from
its family name, so the words stay true for the planner's plans, llama.cpp's own
placements and placements chosen by hand alike. A plan is described as it runs:
with the op-offload boundary the GPU backend really started with
(engine.planning.execution.executable_plan), which is also what the step log
measures against.

Its speed is the cost model's as corrected by what the model's own steps taught it
(engine.planning.step_correction), and says so: "24.1 tokens/s, corrected from 31
after 400 steps"; with nothing learned yet, the cost model's figure alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from app.screen_text.units import format_bytes, speed_text
from engine.model.inventory import SubLayerKind
from engine.planning.execution import executable_plan
from engine.planning.plan import NEVER_OFFLOAD, FamilyEstimate, Plan, PlanFamily
from engine.planning.step_correction import Correction, CorrectionKey
from engine.runtime.step_log import StepRecord, latest_correction

NOT_PROFILED_WORDS = "CPU only (not profiled: run shardchat profile)"
NOT_PROFILED_DETAILS = (
    "Not profiled: llama.cpp's defaults keep the weights in system RAM and the CPU "
    "computes every token.",
    "Profile this machine (Tools → Profile this machine, or shardchat profile) to put "
    "what fits on the GPU.",
)
TOO_SHORT = "– tokens/s (reply too short to measure)"

_K = SubLayerKind
_FFN_KINDS = frozenset({_K.DENSE_FFN, _K.ROUTED_EXPERTS})
_MOE_KINDS = frozenset({_K.MOE_ROUTER, _K.ROUTED_EXPERTS, _K.SHARED_EXPERTS})


@dataclass(frozen=True)
class _Layout:
    """Where a plan's blocks are, counted from its resident set."""

    n_layer: int | None  # the model's blocks; None where the plan does not record them
    attention: frozenset[int]  # blocks whose attention (and so KV cache) is in VRAM
    ffn: frozenset[int]  # blocks whose feed-forward part (or expert bank) is in VRAM
    ffn_name: str  # "experts" for a mixture of experts, else "feed-forward"
    head_on_gpu: bool
    kv_bytes: int

    @property
    def whole_layers(self) -> bool:
        """Each block is on the GPU entirely or not at all (llama.cpp's n_gpu_layers)."""
        return self.attention == self.ffn


def split_in_words(split: str) -> str:
    """The status bar's line for a model split across lent computers: its split as
    app.lent.split said it (where llama.cpp put the weights is the VRAM panel's)."""
    line = split.split(" · ", 1)[0]
    return line[:1].upper() + line[1:]


def plan_in_words(plan: Plan | None) -> str:
    """One line for the status bar: where a chat's layers are, and the VRAM it takes."""
    if plan is None:
        return NOT_PROFILED_WORDS
    plan = executable_plan(plan)
    layout = _layout(plan)
    if not plan.resident:
        budget = plan.vram.budget_bytes
        unused = f" (budget {format_bytes(budget)})" if budget > 0 else ""
        return f"{_all_layers(layout).capitalize()} on the CPU · no VRAM used{unused}"
    vram = f"VRAM {format_bytes(plan.vram.total_bytes)} of {format_bytes(plan.vram.budget_bytes)}"
    if _off_gpu_bytes(plan) == 0:
        return f"{_all_layers(layout).capitalize()} and the KV cache on the GPU · {vram}"
    return f"{_status(plan, layout)} · {vram}"


def plan_details(plan: Plan | None) -> list[str]:
    """A few sentences for the VRAM panel: what VRAM holds, where the KV cache is, what
    the CPU computes for each token and what crosses PCIe, for prompts as for replies."""
    if plan is None:
        return list(NOT_PROFILED_DETAILS)
    plan = executable_plan(plan)
    layout = _layout(plan)
    if not plan.resident:
        return [
            f"Nothing in VRAM: the CPU ({plan.n_threads} threads) computes "
            f"{_all_layers(layout)}, and the KV cache is in system RAM.",
            f"Why: {plan.reason}.",
        ]
    return [_holds(plan, layout), _kv_cache(layout), _each_token(plan, layout), *_prompts(plan)]


def predicted_decode_tps(plan: Plan | None, correction: Correction | None = None) -> float | None:
    """What one chat decodes at (the batch-of-1 tier), as it runs: the cost model's figure,
    divided by what the steps of that tier taught it (`correction`, if any)."""
    if plan is None:
        return None
    predicted = executable_plan(plan).predicted_decode_tokens_per_s
    if not (math.isfinite(predicted) and predicted > 0):
        return None
    return predicted / correction.factor if correction is not None else predicted


def decode_correction(plan: Plan | None, steps: Iterable[StepRecord]) -> Correction | None:
    """The correction a chat's decode steps (the plan's batch-of-1 family and tier) left
    among `steps` (a reply's, as ReplyFinished carries them); None where none learned."""
    if plan is None:
        return None
    plan = executable_plan(plan)
    return latest_correction(steps, CorrectionKey(plan.family_for(1), plan.tier_for(1)))


def correction_words(plan: Plan | None, correction: Correction | None) -> str:
    """ "corrected from 31 after 400 steps": the cost model's own figure and what the
    correction rests on; empty where nothing was learned."""
    model_tps = predicted_decode_tps(plan)
    if model_tps is None or correction is None or correction.steps == 0:
        return ""
    steps = f"{correction.steps} step{'' if correction.steps == 1 else 's'}"
    return f"corrected from {_figure(model_tps)} after {steps}"


def speed_against_plan(
    measured_tps: float, plan: Plan | None, steps: Iterable[StepRecord] = ()
) -> str:
    """A reply's measured decode speed beside the plan's prediction, so a plan that
    promises more than the machine gives is plain to see; the prediction is corrected by
    what the reply's `steps` taught the cost model, and says from what."""
    if not math.isfinite(measured_tps) or measured_tps <= 0:
        return TOO_SHORT
    measured = speed_text(measured_tps, "tokens/s")
    correction = decode_correction(plan, steps)
    predicted = predicted_decode_tps(plan, correction)
    if predicted is None:
        return measured
    corrected = correction_words(plan, correction)
    against = f"{corrected}: " if corrected else ""
    return f"{measured} (plan predicted {predicted:.1f}, {against}{measured_tps / predicted:.0%})"


def _figure(tokens_per_s: float) -> str:
    """A speed said briefly: "31" from 10 on, "0.9" below."""
    return f"{tokens_per_s:.0f}" if tokens_per_s >= 10 else f"{tokens_per_s:.1f}"


# --- reading the plan ---


def _layout(plan: Plan) -> _Layout:
    kinds_by_block: dict[int, set[SubLayerKind]] = {}
    for block, kind in plan.resident:
        if block is not None:
            kinds_by_block.setdefault(block, set()).add(kind)
    resident_kinds = {kind for _, kind in plan.resident}
    return _Layout(
        n_layer=_n_layer(plan, kinds_by_block),
        attention=frozenset(b for b, kinds in kinds_by_block.items() if _K.ATTENTION in kinds),
        ffn=frozenset(b for b, kinds in kinds_by_block.items() if kinds & _FFN_KINDS),
        ffn_name="experts"
        if plan.extras.get("is_moe", bool(resident_kinds & _MOE_KINDS))
        else "feed-forward",
        # a tied head is the token embedding, resident only as the head
        head_on_gpu=bool({(None, _K.OUTPUT_HEAD), (None, _K.TOKEN_EMBEDDING)} & set(plan.resident)),
        kv_bytes=plan.vram.kv_cache_bytes,
    )


def _n_layer(plan: Plan, kinds_by_block: dict[int, set[SubLayerKind]]) -> int | None:
    """The model's blocks, as plan_for_choice records them; a plan made without it still
    tells, where any block is resident: llama.cpp offloads the last blocks first, and every
    placement we make keeps the last block's attention in VRAM whenever any is there."""
    if "n_layer" in plan.extras:
        return int(plan.extras["n_layer"])
    return max(kinds_by_block) + 1 if kinds_by_block else None


def _decode_estimate(plan: Plan, family: PlanFamily) -> FamilyEstimate | None:
    decode = plan.tiers[0]
    return next((e for e in (decode.chosen, *decode.others) if e.family is family), None)


def _off_gpu_bytes(plan: Plan) -> int:
    """Weights not in VRAM: what a step streams when everything runs on the GPU."""
    streamed = _decode_estimate(plan, PlanFamily.GPU_ONLY)
    return streamed.streamed_bytes if streamed is not None else 0


def _decode_streams(plan: Plan) -> bool:
    """A reply's tokens stream the weights not in VRAM (op offload from batch 1)."""
    return plan.family_for(1) is PlanFamily.GPU_ONLY and _off_gpu_bytes(plan) > 0


# --- saying it ---


def _all_layers(layout: _Layout) -> str:
    return "every layer" if layout.n_layer is None else f"all {layout.n_layer} layers"


def _of(count: int, layout: _Layout) -> str:
    """'all 32 layers' or '24 of 32 layers'."""
    if count == layout.n_layer:
        return f"all {count} layers"
    return f"{count} of {layout.n_layer} layers" if layout.n_layer else f"{count} layers"


def _left(count: int, layout: _Layout) -> str:
    """The layers not among `count`: '8 layers', or 'all 32 layers' where none is."""
    if layout.n_layer is None:
        return "every layer"
    left = layout.n_layer - count
    return f"all {left} layers" if count == 0 else f"{left} layers"


def _listed(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _on_gpu(layout: _Layout, kv: str = "") -> list[str]:
    """The blocks in VRAM, as whole layers where the plan keeps them whole; `kv` is said
    with the attention, whose KV cache goes with it."""
    if not layout.attention and not layout.ffn:
        return ["the output layer" if layout.head_on_gpu else "no layers"]
    if layout.whole_layers:
        return [f"{_of(len(layout.attention), layout)}{kv}"]
    parts = [f"attention{kv} of {_of(len(layout.attention), layout)}"] if layout.attention else []
    if layout.ffn:
        parts.append(f"{layout.ffn_name} of {_of(len(layout.ffn), layout)}")
    return parts


def _off_gpu(layout: _Layout) -> list[str]:
    """What stays in system RAM (never empty: the caller knows some weights do)."""
    if layout.whole_layers:  # no block on the GPU counts as whole layers too
        on_gpu = len(layout.attention)
        parts = [] if on_gpu == layout.n_layer else [_left(on_gpu, layout)]
    else:
        parts = [
            f"{name} of {_left(len(on_gpu), layout)}"
            for name, on_gpu in (("attention", layout.attention), (layout.ffn_name, layout.ffn))
            if len(on_gpu) != layout.n_layer
        ]
    return parts + ([] if layout.head_on_gpu else ["the output layer"])


def _status(plan: Plan, layout: _Layout) -> str:
    kv = " + KV cache" if layout.kv_bytes > 0 else ""
    rest = "streamed over PCIe" if _decode_streams(plan) else "CPU"
    return f"GPU: {', '.join(_on_gpu(layout, kv))} · {rest}: {', '.join(_off_gpu(layout))}"


def _holds(plan: Plan, layout: _Layout) -> str:
    weights = format_bytes(plan.vram.weights_bytes)
    if _off_gpu_bytes(plan) == 0:
        return f"The GPU holds the whole model: {_all_layers(layout)} ({weights} of weights)."
    parts = _on_gpu(layout)
    if layout.head_on_gpu and (layout.attention or layout.ffn):
        parts.append("the output layer")
    return f"The GPU holds {_listed(parts)} ({weights} of weights)."


def _kv_cache(layout: _Layout) -> str:
    on_gpu = len(layout.attention)
    if on_gpu == 0:
        return "The KV cache is in system RAM, beside the attention the CPU computes."
    vram = f"The KV cache of {_of(on_gpu, layout)} is in VRAM ({format_bytes(layout.kv_bytes)})"
    if layout.n_layer is None or on_gpu == layout.n_layer:
        return f"{vram}."
    return f"{vram}; the other {layout.n_layer - on_gpu} layers' is in system RAM."


def _each_token(plan: Plan, layout: _Layout) -> str:
    if _off_gpu_bytes(plan) == 0:
        return "Each new token: the GPU computes everything; no weights cross PCIe."
    off_gpu = _listed(_off_gpu(layout))
    if _decode_streams(plan):
        return (
            f"Each new token: {format_bytes(_off_gpu_bytes(plan))} of weights ({off_gpu}) "
            "cross PCIe from system RAM, and the GPU computes everything."
        )
    return (
        f"Each new token: the CPU ({plan.n_threads} threads) computes {off_gpu}; "
        "the GPU computes the rest."
    )


def _prompts(plan: Plan) -> list[str]:
    """How longer steps (prompts, batches) run, where that differs from a reply's tokens."""
    if _off_gpu_bytes(plan) == 0 or _decode_streams(plan):
        return []
    if plan.op_offload_min_batch >= NEVER_OFFLOAD:
        return ["Prompts run the same way: no weights cross PCIe."]
    overlap = (
        f", uploading each weight through {plan.prefetch_slots} staging slots while the GPU "
        "computes the ones before it"
        if plan.prefetch_slots
        else ""
    )
    return [
        f"Steps of {plan.op_offload_min_batch} tokens or more (long prompts) stream the CPU's "
        f"share over PCIe instead ({format_bytes(_off_gpu_bytes(plan))} a step) and compute "
        f"it on the GPU{overlap}."
    ]
