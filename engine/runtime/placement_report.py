"""What llama.cpp did with a plan, read back from llama.cpp itself.

A plan says which tensors live in VRAM, how much device memory that takes and
on which device each op runs for a step of n tokens. Whether llama.cpp did
that is in its log: the buffer sizes it allocated, the device it assigned each
layer to, the tensors an override moved, and - with GGML_SCHED_DEBUG=2 - the
backend the scheduler ran every graph node on. `check_plan` loads a model
under a plan, collects those, and optionally decodes greedily so that plans can
be compared token for token; `shardchat plan --check` prints the result, and
the GPU test tier asserts on it.

The op-offload batch size is read once per process by the GPU backend, so a
check of a plan with another boundary than the process started with must run
in a child process (engine.child_process.run_in_child).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import llama_cpp
import numpy as np

from engine.llama.device_buffers import (
    DeviceBuffers,
    llama_log_lines,
    parse_buffer_lines,
    simulate_compute_buffers,
)
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, SubLayerKind
from engine.planning.execution import load_params_for
from engine.planning.plan import Plan
from engine.runtime.loaded_model import LoadedModel, load_model
from engine.runtime.step_log import StepLog, StepRecord

# llama-model-loader.cpp: "tensor %s (%zu MiB %s) buffer type overridden to %s"
_OVERRIDDEN = re.compile(r"tensor (\S+) \(\d+ MiB (\w+)\) buffer type overridden to (\S+)")
# llama-model.cpp: "load_tensors: layer %3d assigned to device %s, is_swa = %d"
_LAYER_DEVICE = re.compile(r"layer +(\d+) assigned to device (\S+?),")
# ggml-backend.cpp, GGML_SCHED_DEBUG > 1: "node #%3d (%10.10s): %20.20s (%5.5s) [%5.5s %8.8s]"
_NODE = re.compile(r"node # *\d+ \( *([\w_]+)\): +(\S+) \( *[^)]*\) \[(.{5}) ")
_SCHED_DEBUG = "GGML_SCHED_DEBUG"


@dataclass(frozen=True)
class PlanCheck:
    """A plan next to what llama.cpp allocated and placed (and, if asked, what it decoded)."""

    plan: Plan
    allocated: DeviceBuffers
    simulated_compute_bytes: int  # llama.cpp's own no_alloc reservation of the device compute
    tensor_devices: dict[str, str]  # tensor name -> the buffer type or device holding it
    tokens: tuple[int, ...] = ()
    logits: np.ndarray | None = None  # one row per generated token
    node_backends: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    steps: tuple[StepRecord, ...] = ()

    @property
    def account_without_margin(self) -> int:
        vram = self.plan.vram
        return vram.weights_bytes + vram.kv_cache_bytes + vram.compute_bytes

    def misplaced(self, inventory: ModelInventory) -> list[str]:
        """Tensors that are not where the plan put them (device vs host memory)."""
        resident = set(self.plan.resident_tensor_names)
        wrong = []
        for sub in inventory.all_sublayers():
            for name in sub.tensor_names:
                on_device = not _is_host(self.tensor_devices.get(name, "CPU"))
                if on_device != (name in resident):
                    wrong.append(name)
        return wrong


def overridden_tensors(lines: Iterable[str]) -> dict[str, tuple[str, str]]:
    """tensor name -> (ggml type, buffer type) from llama.cpp's "buffer type overridden" lines."""
    return {m[1]: (m[2], m[3]) for line in lines if (m := _OVERRIDDEN.search(line))}


def tensor_devices(lines: Iterable[str], inventory: ModelInventory) -> dict[str, str]:
    """Where llama.cpp put each tensor: its override, else its layer's device.

    llama.cpp keeps the input layer (the token embedding) on the CPU, assigns the
    output head and norm to layer n_layer's device, and every block tensor to its
    block's device, unless an override named it.
    """
    lines = list(lines)
    overridden = {name: buffer for name, (_type, buffer) in overridden_tensors(lines).items()}
    layers: dict[int, str] = {}
    for line in lines:
        if match := _LAYER_DEVICE.search(line):
            layers[int(match.group(1))] = match.group(2)
    found: dict[str, str] = {}
    for sub in inventory.all_sublayers():
        if sub.block is not None:
            default = layers.get(sub.block, "CPU")
        elif sub.kind is SubLayerKind.TOKEN_EMBEDDING and not inventory.tied_output:
            default = "CPU"
        else:
            default = layers.get(len(inventory.blocks), "CPU")
        for name in sub.tensor_names:
            found[name] = overridden.get(name, default)
    return found


def node_backends(lines: Iterable[str]) -> list[tuple[str, str]]:
    """(node name, backend) of every graph node the scheduler printed (GGML_SCHED_DEBUG=2)."""
    found = []
    for line in lines:
        match = _NODE.search(line)
        if match:
            found.append((match.group(2), match.group(3).strip()))
    return found


def check_plan(
    plan: Plan,
    inventory: ModelInventory,
    profile: Profile,
    prompt: Sequence[int] = (),
    generate: int = 0,
    sched_batches: Sequence[int] = (),
) -> PlanCheck:
    """Load the model under `plan`, read back allocations and placement, optionally decode.

    `generate` greedy tokens after `prompt` give tokens and logits to compare plans
    with; each of `sched_batches` is one decode of that many tokens on an empty cache
    with the scheduler's node assignment recorded (and its step logged by StepLog).
    """
    params = load_params_for(plan, inventory, inventory.path)
    if sched_batches:
        os.environ[_SCHED_DEBUG] = "2"  # read when the context creates its scheduler
    simulated = simulate_compute_buffers(params).role_bytes("compute")
    with llama_log_lines() as lines:
        model = load_model(params)
    try:
        allocated = parse_buffer_lines(lines)
        devices = tensor_devices(lines, inventory)
        tokens, logits = _greedy(model.llm, list(prompt), generate) if generate else ((), None)
        backends, steps = _scheduled(model, plan, profile, sched_batches)
    finally:
        model.close()
    return PlanCheck(plan, allocated, simulated, devices, tokens, logits, backends, steps)


def _greedy(llm: Any, prompt: list[int], n: int) -> tuple[tuple[int, ...], np.ndarray]:
    """Greedy tokens and the logits each was chosen from (llama.cpp's last output row)."""
    llm.reset()
    llm.eval(prompt)
    n_vocab = llm.n_vocab()
    tokens, rows = [], []
    for _ in range(n):
        pointer = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        row = np.ctypeslib.as_array(pointer, shape=(n_vocab,)).astype(np.float32)
        token = int(np.argmax(row))
        tokens.append(token)
        rows.append(row)
        llm.eval([token])
    return tuple(tokens), np.stack(rows)


def _scheduled(
    model: LoadedModel, plan: Plan, profile: Profile, batches: Sequence[int]
) -> tuple[dict[int, list[tuple[str, str]]], tuple[StepRecord, ...]]:
    if not batches:
        return {}, ()
    log = StepLog(model, plan, profile).attach()
    found: dict[int, list[tuple[str, str]]] = {}
    for n_tokens in batches:
        with llama_log_lines() as lines:
            tokens = tuple(1 + i % 50 for i in range(n_tokens))
            model.scheduler.prefill(0, tokens, cancel=None)  # on an empty cache
        found[n_tokens] = node_backends(lines)
    return found, tuple(log.drain())


def _is_host(buffer_or_device: str) -> bool:
    return buffer_or_device.startswith("CPU") or buffer_or_device.endswith("_Host")
