"""Whole scenarios the GPU tier runs in a child process, each with a fresh ggml.

A GPU backend reads the op-offload batch size once per process, and the test
process has already started ggml, so a scenario that loads plans runs here, in
`engine.child_process` (which imports this module by name), and returns plain
values for the test to assert on.
"""

from __future__ import annotations

import dataclasses
import queue
import time
from typing import Any

from app.engine_host.events import FINAL_EVENTS, PlanChanged, ReplyFinished
from app.engine_host.worker import EngineWorker
from app.model_lifecycle.auto_budget import AutoBudget
from engine.generation.sampling import GREEDY
from engine.llama.device_buffers import DeviceBuffers, llama_log_lines, parse_buffer_lines
from engine.machine.gpu_probe import probe_gpus
from engine.machine.hardware import probe_hardware
from engine.machine.hardware_info import GpuInfo
from engine.machine.profile import Profile
from engine.model.inventory import read_inventory
from engine.planning.execution import load_params_for
from engine.planning.plan import Plan, PlanRequest
from engine.planning.planner import make_plan

SHORT = GREEDY.with_changes(max_tokens=8)
MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class BudgetStep:
    """One budget change: the engine's answer and what llama.cpp holds on the device after."""

    budget_bytes: int
    reloaded: bool
    plan: Plan
    allocated: DeviceBuffers  # the buffers of the model loaded last (or still loaded)


@dataclasses.dataclass(frozen=True)
class LiveBudgetRun:
    first_plan: Plan
    first_allocated: DeviceBuffers
    steps: tuple[BudgetStep, ...]
    replies: tuple[str, ...]
    prompt_tokens: tuple[int, ...]


class _Engine:
    def __init__(self) -> None:
        self.events: queue.Queue[Any] = queue.Queue()
        self.worker = EngineWorker(self.events.put).start()

    def call(self, request_id: int) -> Any:
        deadline = time.monotonic() + 300
        while True:
            event = self.events.get(timeout=max(deadline - time.monotonic(), 0.01))
            if isinstance(event, FINAL_EVENTS) and event.request_id == request_id:
                return event


def _latest_buffers(lines: list[str]) -> DeviceBuffers:
    """The buffers of the last load in `lines` (each load logs a whole new set)."""
    starts = [i for i, line in enumerate(lines) if "loading model tensors" in line]
    return parse_buffer_lines(lines[starts[-1] :] if starts else lines)


def live_budget_change(
    model_path: str, profile: Profile, budgets_mib: tuple[int, ...], others_mib: tuple[int, ...]
) -> LiveBudgetRun:
    """Chat, change the budget by hand (each of budgets_mib), then let Auto follow a
    simulated drop of the device's free memory (others_mib used by other programs)."""
    profile = dataclasses.replace(profile, fingerprint=probe_hardware().fingerprint())
    inventory = read_inventory(model_path)
    plan = make_plan(inventory, profile, PlanRequest(max(budgets_mib) * MIB, n_ctx=1024))
    engine = _Engine()
    replies, prompts, steps = [], [], []
    try:
        with llama_log_lines() as lines:
            engine.call(engine.worker.load_model(load_params_for(plan, inventory, model_path),
                                                 plan, profile))  # fmt: skip
            first_allocated = _latest_buffers(lines)
            first = engine.call(engine.worker.send_message("My name is Ada.", SHORT))
            replies.append(first.text)
            prompts.append(first.stats.prompt_tokens)
            budgets = [b * MIB for b in budgets_mib]
            gpu = _device_gpu()
            for others in others_mib:  # Auto: the budget follows what other programs leave
                simulated = dataclasses.replace(gpu, other_processes_bytes=others * MIB)
                AutoBudget(budgets.append, lambda g=simulated: g, reserve_bytes=0).poll_once()
            for budget in budgets:
                lines.clear()
                changed = engine.call(engine.worker.set_budget(budget))
                assert isinstance(changed, PlanChanged), changed
                steps.append(BudgetStep(budget, changed.reloaded, changed.plan,
                                        _latest_buffers(lines) if changed.reloaded else
                                        DeviceBuffers()))  # fmt: skip
                reply = engine.call(engine.worker.send_message("What is my name?", SHORT))
                assert isinstance(reply, ReplyFinished), reply
                replies.append(reply.text)
                prompts.append(reply.stats.prompt_tokens)
    finally:
        engine.worker.shutdown()
    return LiveBudgetRun(plan, first_allocated, tuple(steps), tuple(replies), tuple(prompts))


def _device_gpu() -> GpuInfo:
    """The Vulkan device as the hardware probe finds it (lavapipe: free always equals total)."""
    gpus, reason, _driver, _cuda = probe_gpus()
    assert gpus, reason
    return gpus[0]


def check_after_start_up_probe(
    plan: Plan, inventory: Any, profile: Profile, sched_batches: tuple[int, ...]
) -> tuple[int | None, Any]:
    """check_plan as the app runs it: the hardware probe first, then the plan's load.

    Returns the boundary in force after the probe (None: ggml not started by it) and
    the check, whose tiers show whether the plan's boundary still took effect.
    """
    from engine.llama import offload_boundary
    from engine.runtime.placement_report import check_plan

    probe_hardware()
    after_probe = offload_boundary.in_force()
    return after_probe, check_plan(plan, inventory, profile, sched_batches=sched_batches)


@dataclasses.dataclass(frozen=True)
class PoolRun:
    """A load without the shared pool, then the pool made on it (ResidentModel.reshape)."""

    plan: Plan
    allocated: DeviceBuffers
    pooled_plan: Plan
    reloaded: bool
    pooled_allocated: DeviceBuffers  # the new context's buffers (and the weights', if reloaded)
    reply: tuple[int, ...]  # greedy tokens of a stream in the pool's first sequence


def pool_on_demand(model_path: str, profile: Profile, budget_mib: int) -> PoolRun:
    """Load as the window does (no shared cells), then make the pool the API's first client
    or a job would make, and decode in it."""
    from app.model_lifecycle.load_planning import ContextShape
    from app.model_lifecycle.resident_model import ResidentModel
    from engine.generation.stream import StreamRequest

    profile = dataclasses.replace(profile, fingerprint=probe_hardware().fingerprint())
    inventory = read_inventory(model_path)
    plan = make_plan(inventory, profile, PlanRequest(budget_mib * MIB, n_ctx=1024))
    resident = ResidentModel()
    try:
        with llama_log_lines() as lines:
            resident.load(load_params_for(plan, inventory, model_path), plan, profile)
            allocated = parse_buffer_lines(lines)
            lines.clear()
            outcome = resident.reshape(ContextShape.with_pool())
            assert outcome is not None
            pooled = parse_buffer_lines(lines)
        model = resident.require()
        prompt = model.tokenize_text("The sea is", add_bos=model.wants_bos())
        stream = model.scheduler.admit(StreamRequest.of_tokens(prompt, SHORT), 1, seed=0)
        while not stream.done:
            model.scheduler.step()
        return PoolRun(plan, allocated, outcome.plan, outcome.reloaded, pooled,
                       tuple(stream.generated))  # fmt: skip
    finally:
        resident.close()
