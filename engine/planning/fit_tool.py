"""llama.cpp's own `--fit`, run as its tool, to check our reproduction of it.

`engine.planning.llama_fit.fit_layers_to` reproduces common/fit.cpp in Python so
that the planner can cost what a llama.cpp user gets on machines we do not have.
Where a device exists, the real algorithm can be asked: `make test-gpu` builds
`llama-fit-params` (tests/gpu/fit_params/main.cpp with the vendored fit.cpp) and
the GPU tier compares the two here. fit.cpp measures every placement it tries
with a no-alloc test load; `measured_memory` gives the reproduction the same
measurement (weights and KV cache, which the account gets exactly, plus the
compute buffers llama.cpp reserves for that placement), so a disagreement is the
algorithm's, not the account's.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.llama.buffer_overrides import override_patterns_for
from engine.llama.device_buffers import simulate_compute_buffers
from engine.llama.load_params import LoadParams
from engine.model.inventory import ModelInventory, SubLayerKind
from engine.planning.llama_costing import LLAMA_CPP_DEFAULT_UBATCH, NO_CHANGES, vram_account_of
from engine.planning.llama_fit import FitLayers, fit_keys, fit_layers_to
from engine.planning.plan import PlanRequest, SubLayerKey

MIB = 1024 * 1024
_NGL = re.compile(r"-ngl (-?\d+)")
_BLOCK = re.compile(r"blk\\\.(\d+)\\\.")


@dataclass(frozen=True)
class FitChoice:
    """What fit decided, in the terms both sides can state.

    n_gpu_layers is -1 where fit changed nothing (everything fits); host_expert_blocks
    are the blocks whose expert tensors (all, or part of them for the first partial
    layer, which the reproduction cannot split) stay in host memory.
    """

    n_gpu_layers: int
    host_expert_blocks: tuple[int, ...]


def run_tool(
    tool: Path, inventory: ModelInventory, request: PlanRequest, free_bytes: int, target_bytes: int
) -> FitChoice:
    """The tool's choice when `target_bytes` of the device's free memory may be used."""
    model_path = inventory.path
    margin_mib = (free_bytes - target_bytes) // MIB
    ubatch = str(LLAMA_CPP_DEFAULT_UBATCH)  # as the reproduction projects
    args = [str(tool), model_path, str(request.n_ctx), ubatch, str(margin_mib)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"llama-fit-params failed ({done.returncode}): {done.stderr[-400:]}")
    ngl = _NGL.search(done.stdout)
    if ngl is None:
        raise RuntimeError(f"llama-fit-params printed no -ngl: {done.stdout!r}")
    # fit also names the output layer as block n_layer, a pattern that matches no tensor
    blocks = {int(b) for b in _BLOCK.findall(done.stdout)} & set(range(len(inventory.blocks)))
    return FitChoice(int(ngl.group(1)), tuple(sorted(blocks)))


def reproduced(
    inventory: ModelInventory,
    request: PlanRequest,
    target_bytes: int,
    memory: Callable[[FitLayers], int] | None = None,
) -> FitChoice:
    """Our reproduction's choice, stated as the tool states it."""
    layers, note = fit_layers_to(inventory, request, target_bytes, memory)
    keys = fit_keys(inventory, layers)
    host = tuple(
        b.index
        for b in inventory.blocks
        if b.sublayer(SubLayerKind.ROUTED_EXPERTS) is not None
        and (b.index, SubLayerKind.ATTENTION) in keys
        and (b.index, SubLayerKind.ROUTED_EXPERTS) not in keys
    )
    return FitChoice(-1 if note == NO_CHANGES else layers.n_layer, host)


def measured_memory(
    inventory: ModelInventory, model_path: str, request: PlanRequest
) -> Callable[[FitLayers], int]:
    """Device bytes of a fit placement as fit.cpp's test loads see them (cached per placement).

    Weights and KV cache from the account (equal to llama.cpp's buffers, as the GPU tier
    checks); compute from llama.cpp's no-alloc reservation for that very placement, which
    grows when host weights are op-offloaded - the part our account does not model.
    """
    seen: dict[FitLayers, int] = {}

    def memory(layers: FitLayers) -> int:
        if layers not in seen:
            keys = fit_keys(inventory, layers)
            account = vram_account_of(inventory, request, keys)
            params = LoadParams(
                model_path,
                n_ctx=request.n_ctx,
                n_batch=LLAMA_CPP_DEFAULT_UBATCH,
                n_ubatch=LLAMA_CPP_DEFAULT_UBATCH,
                n_gpu_layers=layers.n_layer,
                tensor_overrides=_host_experts(inventory, keys),
                flash_attn=False,  # as the tool's context and llama.cpp's placements' plans
                n_parallel=0,  # the tool's context is one sequence of n_ctx cells
                n_ctx_shared=0,
            )
            compute = simulate_compute_buffers(params).device_bytes
            seen[layers] = account.weights_bytes + account.kv_cache_bytes + compute
        return seen[layers]

    return memory


def _host_experts(inventory: ModelInventory, keys: set[SubLayerKey]) -> tuple[tuple[str, str], ...]:
    """Overrides keeping the experts of offloaded blocks that fit left out in host memory."""
    names = [
        name
        for b in inventory.blocks
        if (b.index, SubLayerKind.ATTENTION) in keys
        and (b.index, SubLayerKind.ROUTED_EXPERTS) not in keys
        for sub in b.sublayers
        if sub.kind is SubLayerKind.ROUTED_EXPERTS
        for name in sub.tensor_names
    ]
    return tuple(override_patterns_for(names, "CPU")) if names else ()
