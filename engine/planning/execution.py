"""Making llama.cpp execute a plan: the load parameters that put each sub-layer where it goes.

A plan becomes load parameters: threads, ubatch, n_gpu_layers (the last blocks
and the output layer, as llama.cpp offloads them), tensor overrides that keep
non-resident weights of offloaded blocks in host memory and put resident ones
of other blocks in VRAM,
the op-offload batch size from which host weights stream to the GPU, and the
staging slots they stream through (engine.llama.prefetch). On a
machine without a GPU the same path yields a CPU-only load with the plan's
threads. (engine.runtime.step_log checks every step against the plan's prediction.)
"""

from __future__ import annotations

from engine.errors import BadInputError
from engine.llama import offload_boundary
from engine.llama.backends import why_no_gpu
from engine.llama.buffer_overrides import buffer_types, override_patterns_for
from engine.llama.load_params import LoadParams
from engine.machine.hardware_info import HardwareInfo
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, SubLayer, SubLayerKind
from engine.planning.cost_model import Placement, Where
from engine.planning.plan import NEVER_OFFLOAD, Plan, PlanFamily
from engine.planning.tier_costing import with_offload_boundary


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
        flash_attn=plan.flash_attn,  # the compute buffer the VRAM account made room for
        n_parallel=plan.request.parallel_sequences,  # the context the account covers
        n_ctx_shared=plan.request.shared_cells,
        kv_unified=plan.request.kv_unified,
        # a plan with nothing resident may still stream its prompt steps to the GPU
        op_offload_min_batch=boundary,
        prefetch_slots=plan.prefetch_slots if asks else 0,
    )
    if plan.n_gpu_layers == 0 and not plan.resident:
        return on_cpu
    return on_cpu.with_changes(
        n_gpu_layers=llama_gpu_layers(plan.n_gpu_layers),
        tensor_overrides=tuple(_overrides(plan, inventory)),
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

    The boundary is fixed when ggml starts (engine.llama.offload_boundary); a plan that
    asks for another one executes with that one, so predictions must use it.
    """
    in_force = offload_boundary.in_force()
    if plan.op_offload_min_batch >= NEVER_OFFLOAD or in_force in (None, plan.op_offload_min_batch):
        return plan
    return with_offload_boundary(plan, in_force)


def placement_for(plan: Plan, family: PlanFamily) -> Placement:
    resident = {key: Where.GPU for key in plan.resident}
    if family is PlanFamily.GPU_ONLY:
        return Placement(Where.STREAMED, resident, plan.prefetch_slots)
    return Placement(Where.CPU, resident)


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
        f"llama.cpp has no GPU device here ({why_no_gpu()}), and the plan puts weights "
        "in VRAM; plan with --vram 0"
    )
