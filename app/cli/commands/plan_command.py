"""`shardchat plan`: what the planner would do for a model, a machine and a VRAM budget.

The machine is this one (its stored profile) or, for simulation, any profile
JSON or one of the described machines we ship (laptop-8gb, desktop-16gb,
rtx5090-desktop): planning needs no GPU, only figures. Without --vram the budget
is the machine's own: all of a described machine's GPU, or what other programs
leave free on this one.

The text speaks to someone choosing a model, so it leads with what runs where and
how fast (app.screen_text.plan_words); llama.cpp's own terms (buffer placement, n_ubatch, the
cost of each step size) follow only with --details.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from app.lent.split import LentSplit, planned_lent_split
from app.machine_profile import this_machine_profile
from app.model_lifecycle.auto_budget import AutoBudget
from app.screen_text.plan_words import plan_details, plan_in_words
from app.screen_text.units import format_bytes, speed_text
from engine.errors import BadInputError
from engine.machine.described_machines import described_names, load_described
from engine.machine.gpu_probe import probe_gpus
from engine.machine.profile import Profile
from engine.model.default_model import default_model_path
from engine.model.inventory import read_inventory
from engine.planning.execution import llama_gpu_layers
from engine.planning.placement_choice import AUTO, PlacementChoice, plan_for_choice, select_gpu
from engine.planning.plan import Plan, PlanRequest, VramAccount
from engine.vision.options import NO_TOKEN_LIMIT
from engine.vision.plan import VisionPlan, plan_vision
from engine.vision.projector import projector_facts

DETAILS_HINT = "(llama.cpp's parameters and the cost of each step size: --details)"


def run_plan(args: argparse.Namespace) -> int:
    choice = PlacementChoice.parse(args.placement)  # bad input fails before the model is read
    inventory = read_inventory(args.model or default_model_path())
    if args.image_px and not args.mmproj:
        raise BadInputError("--image-px needs --mmproj (the projector to plan the image for)")
    if args.lent and args.hardware:
        raise BadInputError(
            "--lent plans with this machine's own profile: the lent computers' speeds were "
            "measured against it (leave out --hardware)"
        )
    if args.here is not None and not args.lent:
        raise BadInputError("--here goes with --lent (what this machine gives a split model)")
    facts = projector_facts(args.mmproj) if args.mmproj else None
    selection = select_gpu(load_profile_for_planning(args.hardware), args.gpu)
    profile = selection.profile
    budget, budget_source = _budget(args.vram, profile, args.hardware is None, selection.index)
    try:
        request = PlanRequest(
            budget, n_ctx=args.ctx, n_parallel=args.parallel, prompt_tokens=args.prompt_tokens
        )
        planner = plan_for_choice(inventory, profile, request, AUTO, selection.index)
        plan = (
            plan_for_choice(inventory, profile, request, choice, selection.index)
            if choice.is_manual
            else planner
        )
        vision = (
            plan_vision(plan, inventory, facts, profile, image_size=args.image_px)
            if facts
            else None
        )
    except ValueError as exc:
        raise BadInputError(str(exc)) from exc
    lent = planned_lent_split(inventory, args.ctx, profile, args.here) if args.lent else None
    if args.json:
        data = plan.to_dict()
        if args.lent:
            data["lent"] = None if lent is None else lent_dict(lent)
        if vision is not None:
            data["vision"] = vision_dict(vision)
        if choice.is_manual:
            data["planner"] = comparison_dict(planner)
        print(json.dumps(data, indent=1, default=str))
    else:
        if selection.note:
            print(selection.note)
        print(render_summary(plan, profile, budget_source))
        print(render_plan(plan) if args.details else DETAILS_HINT)
        if choice.is_manual:
            print(render_comparison(planner, plan, len(inventory.all_sublayers())))
        if vision is not None:
            print(render_vision(vision, args.details))
        if args.lent:
            print(render_lent(lent))
    return 0


def render_lent(lent: LentSplit | None) -> str:
    if lent is None:
        return "With lent computers: none is kept; add one with shardchat devices add"
    return f"With lent computers: {lent.said}"


def lent_dict(lent: LentSplit) -> dict[str, object]:
    cell = lent.prediction
    return {
        "split": json.loads(lent.split.to_json()),
        "said": lent.said,
        "predicted_decode_tokens_per_s": cell.decode_tokens_per_s if cell else None,
        "alone_tokens_per_s": cell.alone_tokens_per_s if cell else None,
        "chosen": cell.chosen if cell else True,
        "link_s": cell.link_s if cell else None,
        "load_transfer_s": cell.load_transfer_s if cell else None,
    }


def _budget(
    vram: int | None, profile: Profile, this_machine: bool, gpu_index: int
) -> tuple[int, str]:
    """The VRAM budget to plan for, and where it came from (said beside it)."""
    if vram is not None:
        return vram, "the budget given"
    gpu = profile.gpu
    if gpu is None:
        return 0, "no GPU"
    if not this_machine:
        return gpu.vram_total_bytes, f"all of the {gpu.name}'s; --vram sets another budget"
    gpus, _reason, _driver, _cuda = probe_gpus()
    free = AutoBudget(lambda _budget: None).budget_for(
        gpus[gpu_index] if gpu_index < len(gpus) else None
    )
    return min(free, gpu.vram_total_bytes), "what other programs leave free; --vram sets another"


def render_summary(plan: Plan, profile: Profile, budget_source: str) -> str:
    """What a person choosing a model needs: where it runs, and how fast it answers."""
    request = plan.request
    together = f", {request.n_parallel} sequences at once" if request.n_parallel > 1 else ""
    lines = [
        f"{plan.model_name} on {_machine(profile)}",
        f"VRAM budget {format_bytes(request.vram_budget_bytes)} ({budget_source}), context "
        f"{request.n_ctx} tokens{together}",
        f"Where it runs: {plan_in_words(plan)}",
        *(f"  {sentence}" for sentence in plan_details(plan)),
        f"How fast: {speed_text(plan.predicted_decode_tokens_per_s, 'tokens/s')} while it writes a "
        f"reply; {plan.predicted_ttft_s:.2f} s to the first token of a reply to a "
        f"{request.prompt_tokens}-token prompt (predicted)",
    ]
    return "\n".join(lines)


def render_comparison(planner: Plan, manual: Plan, n_sublayers: int) -> str:
    """The planner's choice and a manual placement side by side, with manual / planner."""
    placement = str(manual.extras.get("placement", "manual"))
    rows = [
        ("decode tokens/s", planner.predicted_decode_tokens_per_s,
         manual.predicted_decode_tokens_per_s, "{:.1f}"),
        (f"TTFT s ({manual.request.prompt_tokens} tokens)", planner.predicted_ttft_s,
         manual.predicted_ttft_s, "{:.2f}"),
        ("VRAM account", planner.vram.total_bytes, manual.vram.total_bytes, None),
        ("resident sub-layers", len(planner.resident), len(manual.resident), "{:d}"),
    ]  # fmt: skip
    width = 28
    lines = [f"{'':{width}}{'planner':>14}{placement:>14}{'ratio':>9}"]  # manual / planner
    for label, ours, theirs, form in rows:
        # form None: the VRAM row, whose values are byte counts (ints; the row type widens them)
        shown = [format_bytes(int(v)) if form is None else form.format(v) for v in (ours, theirs)]
        if label == "resident sub-layers":
            shown = [f"{v} of {n_sublayers}" for v in shown]
        ratio = f"{theirs / ours:.2f}x" if ours else "-"
        lines.append(f"{label:{width}}{shown[0]:>14}{shown[1]:>14}{ratio:>9}")
    return "\n".join(lines)


def comparison_dict(plan: Plan) -> dict[str, object]:
    """The planner's choice, in brief, beside a manual plan printed as JSON."""
    return {
        "predicted_decode_tokens_per_s": plan.predicted_decode_tokens_per_s,
        "predicted_ttft_s": plan.predicted_ttft_s,
        "vram_total_bytes": plan.vram.total_bytes,
        "resident_sublayers": len(plan.resident),
        "reason": plan.reason,
    }


def load_profile_for_planning(hardware: str | None) -> Profile:
    """A named described machine, a profile file, or this machine's stored profile."""
    if hardware in described_names():
        return load_described(hardware)
    if hardware:
        path = Path(hardware)
        if not path.exists():
            raise BadInputError(
                f"--hardware {hardware}: no described machine of that name and no such profile "
                f"file; the described machines are {', '.join(described_names())}"
            )
        try:
            return Profile.from_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BadInputError(f"{path}: not a readable profile ({exc})") from exc
    stored = this_machine_profile()
    if stored is None:
        raise BadInputError(
            "no profile is stored for this machine; run `shardchat profile --fast` first "
            "(shardchat plan can also simulate a machine with --hardware)"
        )
    return stored


def render_plan(plan: Plan) -> str:
    """The plan in llama.cpp's terms: the VRAM account, the parameters llama.cpp is given,
    and how each step size (token tier) runs, with the runner-up."""
    vram = plan.vram
    weights, kv = format_bytes(vram.weights_bytes), format_bytes(vram.kv_cache_bytes)
    lines = [
        f"In llama.cpp's terms: {plan.reason}",
        f"VRAM      weights {weights} + KV {kv}"
        f" + compute {format_bytes(vram.compute_bytes)}{_staging(vram)}"
        f" + margin {format_bytes(vram.margin_bytes)}"
        f" = {format_bytes(vram.total_bytes)}",
        f"llama.cpp n_gpu_layers {llama_gpu_layers(plan.n_gpu_layers)}, n_threads "
        f"{plan.n_threads}, n_threads_batch {plan.n_threads_batch}, n_ubatch {plan.n_ubatch}, "
        f"flash_attn {'on' if plan.flash_attn else 'off'}, "
        f"GGML_OP_OFFLOAD_MIN_BATCH {_boundary(plan)}, {len(plan.resident_tensor_names)} "
        "tensors placed in VRAM",
        f"uploads   GGML_SCHED_PREFETCH_SLOTS {plan.prefetch_slots}: "
        f"{plan.prefetch_reason or 'no weights stream'}",
        f"{'tier':>6}  {'family':9}{'streamed/step':>14}{'ms/step':>10}{'tokens/s':>11}  runner-up",
    ]
    for tier in plan.tiers:
        runner = tier.runner_up
        other = (
            f"{runner.family.value} {1000 * runner.seconds:.1f} ms"
            + ("" if runner.executable else " (no executor)")
            if runner
            else "-"
        )
        lines.append(
            f"{tier.tier:>6}  {tier.chosen.family.value:9}"
            f"{format_bytes(tier.chosen.streamed_bytes):>14}{1000 * tier.chosen.seconds:>10.1f}"
            f"{tier.tokens_per_s:>11.1f}  {other}"
        )
    return "\n".join(lines)


def render_vision(vision: VisionPlan, details: bool = True) -> str:
    """The VLMOpt choices, the image, the predicted peaks and why; with `details`, what
    mtmd (llama.cpp's vision library) is told."""
    options, image, facts = vision.options, vision.image, vision.projector
    limit = "own" if options.image_max_tokens == NO_TOKEN_LIMIT else options.image_max_tokens
    saving = f" ({vision.saving:.1f}x less)" if vision.saving else ""
    mtmd = [
        f"mtmd      use_gpu {int(options.encoder_on_gpu)}, flash_attn "
        f"{'enabled' if options.flash_attention else 'disabled'}, image_max_tokens {limit}, "
        f"max side {options.max_side_px or '-'} px, free after encode "
        f"{'yes' if options.free_after_encode else 'no'}, language model steps aside "
        f"{'yes' if options.language_steps_aside else 'no'}",
    ]
    lines = [
        f"VLMOpt    {options.describe()}",
        f"  {options.reason}",
        *(mtmd if details else []),
        f"image     {image.input_width}x{image.input_height} -> {image.resolution}, "
        f"{image.n_tokens} tokens ({facts.projector_type}, {facts.name})",
        f"peak VRAM {format_bytes(vision.peak_bytes)} with VLMOpt, "
        f"{format_bytes(vision.peak_without_bytes)} without{saving}; encoder "
        f"{format_bytes(vision.vision.total_bytes)} vs "
        f"{format_bytes(vision.vision_without.total_bytes)}; resident set "
        f"{vision.resident_set.value}",
    ]
    lines += [f"  {reason}" for reason in vision.reasons]
    return "\n".join(lines)


def vision_dict(vision: VisionPlan) -> dict[str, object]:
    return {
        "options": asdict(vision.options),
        "input_px": [vision.image.input_width, vision.image.input_height],
        "effective_px": [vision.image.width, vision.image.height],
        "tokens": vision.image.n_tokens,
        "full_resolution_tokens": vision.full_image.n_tokens,
        "resident_set": vision.resident_set.value,
        "peak_bytes": vision.peak_bytes,
        "peak_without_bytes": vision.peak_without_bytes,
        "encode_bytes": vision.encode_bytes,
        "decode_bytes": vision.decode_bytes,
        "vision_bytes": vision.vision.total_bytes,
        "vision_without_bytes": vision.vision_without.total_bytes,
        "restore_s": vision.restore_s,
        "shrink_s": vision.shrink_s,
        "reasons": list(vision.reasons),
    }


def _machine(profile: Profile) -> str:
    hardware = profile.hardware or {}
    cpu = hardware.get("cpu", {}).get("model", f"{profile.physical_cores} cores")
    gpus = [g.get("name", "GPU") for g in hardware.get("gpus", [])]
    parts = ", ".join([cpu, *gpus])
    return f"{parts} (described)" if profile.is_described else parts


def _staging(vram: VramAccount) -> str:
    return f" (upload slots {format_bytes(vram.staging_bytes)})" if vram.staging_bytes else ""


def _boundary(plan: Plan) -> str:
    return "never" if plan.op_offload_min_batch >= 1 << 30 else str(plan.op_offload_min_batch)
