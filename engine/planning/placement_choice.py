"""Placement by hand: the planner's choice, CPU only, or a llama.cpp-style offload (issue 13).

Some people want the control LM Studio's offload slider and llama.cpp's flags give
them: whole layers on the GPU (`-ngl N`), the experts of the first N blocks in host
memory (`--n-cpu-moe N`), or no GPU at all. A `PlacementChoice` names one of those,
and `plan_for_choice` turns it into an ordinary `Plan`, costed by the same cost
model and VRAM account as the planner's, so the two predictions can be set side by
side and the engine runs either the same way (engine.planning.execution).

A manual placement whose VRAM account exceeds the budget is refused with what it
needs, never shrunk behind the user's back: they asked for exactly that placement.

Which GPU: `select_gpu` checks an index against the GPUs the profile's machine has,
as llama.cpp numbers them (discrete GPUs first; integrated ones only when there is no
discrete GPU, since llama.cpp then ignores them), and the plan records it
(`extras["main_gpu"]`, -1 for CPU only: llama.cpp's single-GPU mode with no device).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from engine.errors import BadInputError
from engine.llama.load_params import LoadParams
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory
from engine.planning.cost_model import CostModel
from engine.planning.llama_costing import costed_placement, layer_keys, plan_blocks, vram_account_of
from engine.planning.llama_placements import n_cpu_moe_keys
from engine.planning.plan import Plan, PlanRequest, VramAccount
from engine.planning.planner import make_plan, run_our_way
from engine.planning.tier_costing import cpu_plan, margin_floor
from engine.planning.vram_account import margin_floor_for

GIB = 1 << 30
NO_GPU = -1  # llama.cpp's main_gpu for "no device" (with split_mode NONE)


class PlacementKind(str, Enum):
    AUTO = "auto"  # the planner decides
    CPU = "cpu"  # nothing on the GPU
    LAYERS = "layers"  # n_gpu_layers = N, llama.cpp's whole-layer offload
    CPU_MOE = "cpu-moe"  # every layer on the GPU but the experts of the first N blocks


class PlacementDoesNotFit(BadInputError, ValueError):
    """A manual placement whose VRAM account exceeds the budget (the message says by how much).

    A ValueError too, so every caller that turns planning errors into bad input
    (the CLI, the worker) reports it as one line.
    """


@dataclass(frozen=True)
class PlacementChoice:
    """Who places the weights: the planner, or the user (and how)."""

    kind: PlacementKind = PlacementKind.AUTO
    count: int = 0  # N of layers:N and cpu-moe:N

    @classmethod
    def parse(cls, text: str) -> PlacementChoice:
        """'auto', 'cpu', 'layers:N' or 'cpu-moe:N'; anything else is bad input."""
        cleaned = text.strip().lower()
        name, colon, count = cleaned.partition(":")
        if name in (PlacementKind.AUTO.value, PlacementKind.CPU.value) and not colon:
            return cls(PlacementKind(name))
        if name in (PlacementKind.LAYERS.value, PlacementKind.CPU_MOE.value):
            if not count.isdigit():
                raise BadInputError(
                    f"placement {text!r}: {name} needs a count of layers, e.g. {name}:8"
                )
            return cls(PlacementKind(name), int(count))
        raise BadInputError(
            f"placement {text!r} is not one of auto, cpu, layers:N (N whole layers on the GPU, "
            "as llama.cpp's n_gpu_layers counts them) or cpu-moe:N (experts of the first N "
            "blocks in host memory)"
        )

    @property
    def is_manual(self) -> bool:
        return self.kind is not PlacementKind.AUTO

    def __str__(self) -> str:
        if self.kind in (PlacementKind.LAYERS, PlacementKind.CPU_MOE):
            return f"{self.kind.value}:{self.count}"
        return str(self.kind.value)


AUTO = PlacementChoice()
CPU_ONLY = PlacementChoice(PlacementKind.CPU)


# --- which GPU ---


@dataclass(frozen=True)
class GpuSelection:
    """The GPU a plan is made for, and the profile to plan it with."""

    index: int
    profile: Profile
    note: str = ""  # said when the figures are another GPU's


def select_gpu(profile: Profile, index: int | None) -> GpuSelection:
    """Check `index` against the profile's GPUs, in llama.cpp's numbering; None: the default.

    The profiler measures the first GPU only, so another GPU is planned with its own
    memory and the measured GPU's speed figures, and `note` says so.
    """
    if index is None:
        return GpuSelection(0, profile)
    gpus = list((profile.hardware or {}).get("gpus") or [])
    if not gpus and profile.gpu is not None:
        gpus = [{"index": 0, "name": profile.gpu.name, "ggml_device": profile.gpu.ggml_device}]
    if not gpus or profile.gpu is None:
        raise BadInputError(
            f"--gpu {index}: the profile has no usable GPU (use --placement cpu, or none)"
        )
    if not 0 <= index < len(gpus):
        listed = ", ".join(f"{i} ({g.get('name', 'GPU')})" for i, g in enumerate(gpus))
        only = "only GPU 0 is valid" if len(gpus) == 1 else f"valid: 0 to {len(gpus) - 1}"
        raise BadInputError(f"--gpu {index}: no such GPU; {only} ({listed})")
    chosen = gpus[index]
    if chosen.get("integrated") and any(not g.get("integrated") for g in gpus):
        raise BadInputError(
            f"--gpu {index}: {chosen.get('name', 'GPU')} is integrated, and llama.cpp uses an "
            "integrated GPU only on a machine without a discrete one"
        )
    if not chosen.get("ggml_device") and not profile.is_described and index != 0:
        raise BadInputError(
            f"--gpu {index}: this llama.cpp build has no backend for {chosen.get('name', 'it')}"
        )
    measured = _measured_index(profile, gpus)
    if index == measured:
        return GpuSelection(index, profile)
    name = str(chosen.get("name", f"GPU {index}"))
    gpu = replace(
        profile.gpu,
        name=name,
        vram_total_bytes=int(chosen.get("vram_total_bytes", profile.gpu.vram_total_bytes)),
        backend=str(chosen.get("backend", profile.gpu.backend)),
        ggml_device=chosen.get("ggml_device"),
        margin_floor_bytes=max(margin_floor_for(name), profile.gpu.margin_floor_bytes),
    )
    note = (
        f"GPU {index} ({name}) was not profiled: planned with its memory and the speed "
        f"figures of GPU {measured} ({profile.gpu.name})"
    )
    return GpuSelection(index, replace(profile, gpu=gpu), note)


def _measured_index(profile: Profile, gpus: list[dict[str, Any]]) -> int:
    """Which of the machine's GPUs the profile's figures are of (the profiler's: the first)."""
    assert profile.gpu is not None
    for i, gpu in enumerate(gpus):
        if profile.gpu.ggml_device and gpu.get("ggml_device") == profile.gpu.ggml_device:
            return i
    return 0


# --- the plan ---


def plan_for_choice(
    inventory: ModelInventory,
    profile: Profile,
    request: PlanRequest,
    choice: PlacementChoice = AUTO,
    gpu: int = 0,
) -> Plan:
    """The plan for a placement choice, costed like the planner's own.

    A manual placement runs our way (our threads and op-offload boundary: the same
    engine runs it), so only the placement differs from the planner's choice. Raises
    PlacementDoesNotFit when its VRAM account exceeds the budget, ValueError when the
    budget exceeds the GPU, BadInputError when the choice does not apply to the model.
    """
    if choice.kind is PlacementKind.AUTO:
        plan = make_plan(inventory, profile, request)
    elif choice.kind is PlacementKind.CPU:
        plan = cpu_plan(inventory, CostModel(profile), request, "CPU only, as asked")
        plan = replace(plan, vram=VramAccount(request.vram_budget_bytes, 0, 0, 0, 0))
    else:
        plan = _manual_plan(inventory, profile, request, choice)
    main_gpu = NO_GPU if choice.kind is PlacementKind.CPU else gpu
    device = profile.gpu.ggml_device if profile.gpu is not None else None
    extras = {
        "placement": str(choice), "gpu": gpu, "main_gpu": main_gpu, "ggml_device": device,
        # what a placement control needs to offer (N up to n_layer, experts only for MoE)
        "n_layer": len(inventory.blocks), "is_moe": inventory.is_moe,
    }  # fmt: skip
    return replace(plan, extras={**plan.extras, **extras})


def _manual_plan(
    inventory: ModelInventory, profile: Profile, request: PlanRequest, choice: PlacementChoice
) -> Plan:
    if profile.gpu is None:
        raise BadInputError(f"placement {choice} needs a GPU, and the profile has none")
    if request.vram_budget_bytes > profile.gpu.vram_total_bytes:
        raise ValueError(
            f"the budget ({request.vram_budget_bytes / GIB:.1f} GiB) exceeds the GPU's memory "
            f"({profile.gpu.vram_total_bytes / GIB:.1f} GiB)"
        )
    n = len(inventory.blocks)
    if choice.kind is PlacementKind.LAYERS:
        layers = min(choice.count, n + 1)  # llama.cpp clamps -ngl 999 the same way
        keys = layer_keys(inventory, layers)
        blocks = plan_blocks(layers)
        reason = f"manual placement {choice}: n_gpu_layers={layers} of {n + 1} (whole layers)"
    else:
        if not inventory.is_moe:
            raise BadInputError(
                f"placement {choice}: {inventory.name} is not a mixture-of-experts model "
                "(use layers:N)"
            )
        n_cpu = min(choice.count, n)
        keys = n_cpu_moe_keys(inventory, n_cpu)
        blocks = n
        reason = (
            f"manual placement {choice}: experts of the first {n_cpu} of {n} blocks in host "
            "memory, everything else on the GPU"
        )
    account = vram_account_of(inventory, request, keys, margin_floor(profile))
    if account.total_bytes > request.vram_budget_bytes:
        raise PlacementDoesNotFit(
            f"placement {choice} needs {_gib(account.total_bytes)} of VRAM (weights "
            f"{_gib(account.weights_bytes)} + KV {_gib(account.kv_cache_bytes)} + compute "
            f"{_gib(account.compute_bytes)} + margin {_gib(account.margin_bytes)}), more than "
            f"the {_gib(request.vram_budget_bytes)} budget"
        )
    plan = costed_placement(inventory, profile, request, keys, blocks, reason)
    return run_our_way(plan, inventory, CostModel(profile))


def replan(
    inventory: ModelInventory, profile: Profile, request: PlanRequest, previous: Plan
) -> tuple[Plan, str | None]:
    """The plan for a new request under the choice `previous` was made with.

    A manual placement that no longer fits the new budget falls back to the planner's
    choice, and the second value says why; the plan remembers the placement asked for,
    so a later budget it fits brings it back.
    """
    extras = previous.extras
    wanted = PlacementChoice.parse(
        str(extras.get("requested_placement") or extras.get("placement") or "auto")
    )
    gpu = int(extras.get("gpu", 0))
    try:
        return plan_for_choice(inventory, profile, request, wanted, gpu), None
    except PlacementDoesNotFit as exc:
        plan = plan_for_choice(inventory, profile, request, AUTO, gpu)
        notice = f"{exc}: using the planner's choice until it fits again"
        plan = replace(
            plan,
            reason=f"{wanted} does not fit this budget; {plan.reason}",
            extras={**plan.extras, "requested_placement": str(wanted)},
        )
        return plan, notice


def load_params_for_plan(plan: Plan, inventory: ModelInventory, model_path: str) -> LoadParams:
    """engine.planning.execution.load_params_for, on the plan's GPU (or on none: CPU only).

    The tensor overrides name the first GPU's buffer type; on another GPU they name
    that GPU's, which exists only where llama.cpp can see it (checked at load).
    """
    from engine.planning.execution import load_params_for

    params = load_params_for(plan, inventory, model_path)
    main_gpu = int(plan.extras.get("main_gpu", 0))
    device = plan.extras.get("ggml_device")
    changes: dict[str, Any] = {"main_gpu": main_gpu}
    if main_gpu > 0 and params.tensor_overrides:
        target = _device_buffer_type(device, main_gpu)
        overrides = params.tensor_overrides
        changes["tensor_overrides"] = tuple(
            (pattern, buft if buft == "CPU" else target) for pattern, buft in overrides
        )
    return params.with_changes(**changes)


def _device_buffer_type(device: str | None, index: int) -> str:
    from engine.llama.buffer_overrides import buffer_types

    for name, kind in sorted(buffer_types().items()):
        if kind.device == device and not kind.is_host and not kind.is_extra:
            return name
    raise BadInputError(
        f"GPU {index} ({device or 'no llama.cpp device'}) has no buffer type in this llama.cpp "
        "build; choose another --gpu"
    )


def _gib(n_bytes: int) -> str:
    return f"{n_bytes / GIB:.2f} GiB"
