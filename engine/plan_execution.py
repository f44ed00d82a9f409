"""Making llama.cpp execute a plan, and checking every step against the plan's prediction.

A plan becomes load parameters: threads, ubatch, n_gpu_layers (the last blocks
and the output layer, as llama.cpp offloads them), tensor overrides that keep
non-resident weights of offloaded blocks in host memory and put resident ones
of other blocks in VRAM,
and the op-offload batch size from which host weights stream to the GPU. On a
machine without a GPU the same path yields a CPU-only load with the plan's
threads.

`StepLog` wraps the context's decode call, so every llama_decode is timed and
logged as n_tokens -> tier -> family -> predicted vs measured milliseconds.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass

from engine import offload_boundary
from engine.buffer_overrides import buffer_types, override_patterns_for
from engine.cost_model import CostModel, Placement, Where
from engine.decode_step import DecodeStep
from engine.errors import BadInputError
from engine.hardware import HardwareInfo
from engine.inventory import ModelInventory, SubLayer, SubLayerKind
from engine.model_params import LoadParams
from engine.plan import NEVER_OFFLOAD, Plan, PlanFamily
from engine.profile import Profile
from engine.runtime import LoadedModel
from engine.tier_costing import with_offload_boundary

log = logging.getLogger("shardchat.steps")


def check_profile_is_this_machine(profile: Profile, hardware: HardwareInfo) -> None:
    """Running (not simulating) under a plan needs this machine's own profile."""
    if profile.is_described or profile.fingerprint != hardware.fingerprint():
        raise BadInputError(
            f"the profile ({profile.fingerprint}, {profile.mode.value}) is not this machine's "
            f"({hardware.fingerprint()}); run `shardchat profile --fast` here, or use "
            "`shardchat plan --hardware` to simulate another machine"
        )


def load_params_for(plan: Plan, inventory: ModelInventory, model_path: str) -> LoadParams:
    """The llama.cpp parameters that execute `plan` for this model.

    The op-offload boundary goes into the environment first: a GPU backend reads
    GGML_OP_OFFLOAD_MIN_BATCH once, when ggml first lists its devices (which finding
    the GPU buffer type below would do), and keeps that value for the process.
    """
    streams = plan.op_offload_min_batch < NEVER_OFFLOAD
    resident = set(plan.resident)
    everything = all((s.block, s.kind) in resident for s in inventory.all_sublayers())
    # with every weight resident nothing streams: whatever boundary is in force will do
    asks = streams and not everything
    boundary = offload_boundary.request(plan.op_offload_min_batch) if asks else None
    on_cpu = LoadParams(
        model_path=model_path,
        n_ctx=plan.request.n_ctx,
        n_batch=max(plan.n_ubatch, 512),
        n_ubatch=plan.n_ubatch,
        n_threads=plan.n_threads,
        n_threads_batch=plan.n_threads_batch,
        # a plan that never streams must not let llama.cpp offload host ops anyway
        op_offload=streams,
    )
    if plan.n_gpu_layers == 0 and not plan.resident:
        return on_cpu
    return on_cpu.with_changes(
        n_gpu_layers=llama_gpu_layers(plan.n_gpu_layers),
        tensor_overrides=tuple(_overrides(plan, inventory)),
        op_offload_min_batch=boundary,
    )


def llama_gpu_layers(blocks: int) -> int:
    """llama.cpp's n_gpu_layers for the last `blocks` blocks on the GPU.

    llama.cpp counts the output layer as one more layer after the blocks: n_gpu_layers=N
    puts blocks n_layer + 1 - N .. n_layer - 1 and the output head on the GPU, so N
    blocks need N + 1 (and N = n_layer keeps block 0, with its KV cache, on the CPU).
    """
    return blocks + 1 if blocks > 0 else 0


def executable_plan(plan: Plan) -> Plan:
    """`plan` costed with the op-offload boundary the GPU backend really runs with.

    The boundary is fixed when ggml starts (engine.offload_boundary); a plan that
    asks for another one executes with that one, so predictions must use it.
    """
    in_force = offload_boundary.in_force()
    if plan.op_offload_min_batch >= NEVER_OFFLOAD or in_force in (None, plan.op_offload_min_batch):
        return plan
    return with_offload_boundary(plan, in_force)


def placement_for(plan: Plan, family: PlanFamily) -> Placement:
    resident = {key: Where.GPU for key in plan.resident}
    rest = Where.STREAMED if family is PlanFamily.GPU_ONLY else Where.CPU
    return Placement(rest, resident)


def _overrides(plan: Plan, inventory: ModelInventory) -> list[tuple[str, str]]:
    """Move what llama.cpp's n_gpu_layers would misplace: host-bound weights of offloaded
    blocks (and the head) back to the CPU, resident weights of other blocks to the GPU."""
    gpu = _gpu_buffer_type()
    offloaded = {b.index for b in inventory.blocks[len(inventory.blocks) - plan.n_gpu_layers :]}
    resident = set(plan.resident)
    to_host: list[str] = []
    to_gpu: list[str] = []
    for sub in inventory.all_sublayers():
        on_gpu_by_default = _on_gpu_by_default(sub, offloaded, inventory.tied_output)
        wanted_on_gpu = (sub.block, sub.kind) in resident
        if on_gpu_by_default and not wanted_on_gpu:
            to_host += sub.tensor_names
        elif wanted_on_gpu and not on_gpu_by_default:
            to_gpu += sub.tensor_names
    pairs = override_patterns_for(to_host, "CPU") if to_host else []
    return pairs + (override_patterns_for(to_gpu, gpu) if to_gpu else [])


def _on_gpu_by_default(sub: SubLayer, offloaded: set[int], tied_output: bool) -> bool:
    """Where n_gpu_layers alone puts a sub-layer: offloaded blocks and, with any block
    offloaded, the output layer (a tied head is llama.cpp's duplicate of the embedding
    there; the embedding itself, the input layer, always stays on the CPU)."""
    if sub.block is not None:
        return sub.block in offloaded
    if sub.kind is SubLayerKind.TOKEN_EMBEDDING:
        return tied_output and bool(offloaded)
    return bool(offloaded)


def _gpu_buffer_type() -> str:
    for name, kind in sorted(buffer_types().items()):
        if kind.device != "CPU" and not kind.is_host and not kind.is_extra:
            return name
    raise BadInputError(
        "this llama.cpp build has no GPU backend, and the plan puts weights in VRAM; "
        "plan with --vram 0 or install a GPU build"
    )


@dataclass(frozen=True)
class StepRecord:
    """One llama_decode: its size, tier and family, predicted and measured milliseconds."""

    n_tokens: int
    n_past: int
    tier: int
    family: PlanFamily
    predicted_ms: float
    measured_ms: float


class StepLog:
    """Times every llama_decode of a loaded model and sets it beside the plan's prediction."""

    def __init__(self, model: LoadedModel, plan: Plan, profile: Profile, keep: int = 4096) -> None:
        self._model = model
        self._plan = executable_plan(plan)
        self._cost = CostModel(profile)
        self.records: deque[StepRecord] = deque(maxlen=keep)
        self._placements = {f: placement_for(plan, f) for f in PlanFamily}

    def attach(self) -> StepLog:
        """Watch the steps of the model's scheduler (the chat and vision turns)."""
        self._model.scheduler.observers.append(self.record)
        return self

    def detach(self) -> None:
        if self.record in self._model.scheduler.observers:
            self._model.scheduler.observers.remove(self.record)

    def use_plan(self, plan: Plan) -> None:
        """The budget changed without moving any weight: predict with the new plan."""
        self._plan = executable_plan(plan)
        self._placements = {f: placement_for(plan, f) for f in PlanFamily}

    def drain(self) -> list[StepRecord]:
        records = list(self.records)
        self.records.clear()
        return records

    def record(self, step: DecodeStep) -> None:
        """One step of the scheduler, set beside what the plan predicted for it."""
        n_tokens, n_past, outputs = step.n_tokens, step.n_past, step.n_outputs
        family = self._plan.family_for(n_tokens)
        threads = self._plan.n_threads if n_tokens == 1 else self._plan.n_threads_batch
        predicted = self._cost.predict_step(
            self._model.inventory, n_tokens, threads, max(outputs, 1), n_past,
            self._placements[family],
        ).seconds  # fmt: skip
        record = StepRecord(
            n_tokens,
            n_past,
            self._plan.tier_for(n_tokens),
            family,
            1e3 * predicted,
            1e3 * step.seconds,
        )
        self.records.append(record)
        log.debug(
            "llama_decode %d tokens -> tier %d -> %s: predicted %.2f ms, measured %.2f ms",
            n_tokens, record.tier, family.value, record.predicted_ms, record.measured_ms,
        )  # fmt: skip
