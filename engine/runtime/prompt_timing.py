"""One prompt and a few decode steps under a plan, timed: what bench/streamed_prefill.py
compares with and without staging slots and bench/gpu_plan_check.py across placements,
one fresh process per run (the op-offload boundary is read once per process,
engine.llama.offload_boundary)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from engine.llama.device_buffers import DeviceBuffers, llama_log_lines, parse_buffer_lines
from engine.model.inventory import ModelInventory
from engine.planning.execution import load_params_for
from engine.planning.plan import Plan
from engine.runtime.loaded_model import load_model


@dataclass(frozen=True)
class PromptTiming:
    prompt_tokens_per_s: float
    decode_tokens_per_s: float
    staging_line: str  # llama.cpp's "prefetch staging buffer" line, "" without slots
    # llama.cpp's own buffer lines at the load (what the budget holds, by its own report)
    allocated: DeviceBuffers = field(default_factory=DeviceBuffers)


def time_prompt(
    plan: Plan, inventory: ModelInventory, n_prompt: int, n_decode: int = 16
) -> PromptTiming:
    """Load under `plan`, evaluate an n_prompt-token prompt, then decode n_decode tokens."""
    params = load_params_for(plan, inventory, inventory.path)
    with llama_log_lines() as lines:
        model = load_model(params)
    staging = next((line.strip() for line in lines if "prefetch staging" in line), "")
    allocated = parse_buffer_lines(lines)
    try:
        llm = model.llm
        started = time.perf_counter()
        llm.eval([1 + (7 * i) % 4000 for i in range(n_prompt)])
        prompt_s = time.perf_counter() - started
        started = time.perf_counter()
        for i in range(n_decode):
            llm.eval([1 + i])
        decode_s = time.perf_counter() - started
    finally:
        model.close()
    return PromptTiming(n_prompt / prompt_s, n_decode / decode_s, staging, allocated)
