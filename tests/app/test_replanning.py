"""Live re-planning on the worker: a new budget mid-conversation, with and without a reload."""

from __future__ import annotations

import io
import queue
import time
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image

import engine.planning.execution as plan_execution
from app.engine_host.events import (
    FINAL_EVENTS,
    ModelLoaded,
    PlacementFellBack,
    PlanChanged,
    ReplyFinished,
    RequestFailed,
)
from app.engine_host.worker import EngineWorker
from app.model_lifecycle.auto_budget import AutoBudget
from app.model_lifecycle.load_planning import LoadRequest
from engine.generation.sampling import GREEDY
from engine.llama.load_params import LoadParams
from engine.machine.described_machines import load_described
from engine.machine.hardware import probe_hardware
from engine.machine.hardware_info import GpuInfo
from engine.machine.profile import Profile
from engine.model.image_input import ImageFile
from engine.model.inventory import read_inventory
from engine.model.synthetic import write_shape_only_model
from engine.model.synthetic_specs import QWEN25_VL_7B_TEXT
from engine.planning.execution import load_params_for
from engine.planning.placement_choice import PlacementChoice, load_params_for_plan, plan_for_choice
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan
from engine.vision.projector import QWEN25_VL_7B
from tests.shape_only_projector import write_shape_only_projector
from tests.synthetic_vision import write_synthetic_vlm

RECORDED = Path(__file__).resolve().parents[1] / "data" / "profile-epyc-2core-fast.json"
SHORT = GREEDY.with_changes(max_tokens=8)


class Engine:
    def __init__(self) -> None:
        self.events: queue.Queue = queue.Queue()
        self.worker = EngineWorker(self.events.put).start()

    def call(self, request_id: int):
        deadline = time.monotonic() + 60
        while True:
            event = self.events.get(timeout=max(deadline - time.monotonic(), 0.01))
            if isinstance(event, FINAL_EVENTS) and event.request_id == request_id:
                return event


@pytest.fixture
def engine():
    engine = Engine()
    yield engine
    engine.worker.shutdown()


@pytest.fixture(scope="module")
def planned(default_model_file: Path):
    profile = replace(
        Profile.from_json(RECORDED.read_text()), fingerprint=probe_hardware().fingerprint()
    )
    inventory = read_inventory(default_model_file)
    plan = make_plan(inventory, profile, PlanRequest(0, n_ctx=1024))
    return plan, profile, load_params_for(plan, inventory, str(default_model_file))


def test_a_new_budget_that_moves_nothing_replans_without_reloading(engine, planned) -> None:
    plan, profile, params = planned
    engine.call(engine.worker.load_model(params, plan, profile))
    first = engine.call(engine.worker.send_message("My name is Ada.", SHORT))
    changed = engine.call(engine.worker.set_budget(2 << 30))
    assert isinstance(changed, PlanChanged) and not changed.reloaded
    assert changed.vram_budget_bytes == 2 << 30 and changed.n_gpu_layers == 0
    second = engine.call(engine.worker.send_message("What is my name?", SHORT))
    assert isinstance(second, ReplyFinished)
    assert second.stats.reused_prompt_tokens >= first.stats.prompt_tokens  # cache kept
    assert second.steps and second.steps[0].n_past > 0


def test_a_budget_change_that_moves_the_placement_reloads_and_keeps_the_conversation(
    engine, planned
) -> None:
    plan, profile, params = planned
    engine.call(engine.worker.load_model(params.with_changes(n_threads=1), plan, profile))
    first = engine.call(engine.worker.send_message("My name is Ada.", SHORT))
    changed = engine.call(engine.worker.set_budget(0))
    assert isinstance(changed, PlanChanged) and changed.reloaded  # threads back to the plan's
    second = engine.call(engine.worker.send_message("What is my name?", SHORT))
    assert isinstance(second, ReplyFinished)
    # the whole history is in the reloaded model's first prompt: nothing lost, nothing doubled
    assert second.stats.reused_prompt_tokens == 0
    history = first.stats.prompt_tokens + first.stats.generated_tokens
    assert history < second.stats.prompt_tokens < history + 40


def test_set_budget_needs_a_planned_model(engine, default_model_file: Path) -> None:
    engine.call(engine.worker.load_model(LoadParams(str(default_model_file), n_ctx=512)))
    failed = engine.call(engine.worker.set_budget(1 << 30))
    assert isinstance(failed, RequestFailed) and failed.bad_input


def described_gpu(others: int) -> GpuInfo:
    """A described 8 GiB laptop GPU whose other processes use `others` bytes."""
    return GpuInfo(
        index=0, name="NVIDIA GeForce RTX 4060 Laptop GPU", uuid="GPU-described",
        vram_total_bytes=8 << 30, vram_free_bytes=(8 << 30) - others, vram_used_bytes=others,
        other_processes_bytes=others, pcie_generation_current=4, pcie_generation_max=4,
        pcie_width_current=8, pcie_width_max=8, compute_capability=(8, 9),
    )  # fmt: skip


def test_auto_budget_steps_aside_when_a_game_takes_vram_and_returns_after() -> None:
    timeline = iter([0, 100 << 20, 6 << 30, 6 << 30, 0])  # a game starts, stays, quits
    applied: list[int] = []
    auto = AutoBudget(applied.append, lambda: described_gpu(next(timeline)), 512 << 20)
    results = [auto.poll_once() for _ in range(5)]
    assert applied == [(8 << 30) - (512 << 20), (2 << 30) - (512 << 20), (8 << 30) - (512 << 20)]
    assert results[1] is None and results[3] is None  # small wobbles and no change are ignored


def test_auto_budget_without_a_gpu_is_zero() -> None:
    applied: list[int] = []
    AutoBudget(applied.append, lambda: None).poll_once()
    assert applied == [0]


def test_a_new_budget_keeps_the_projector_and_replans_it(engine, planned, tmp_path: Path) -> None:
    _plan, profile, _params = planned
    model_file, mmproj = write_synthetic_vlm(tmp_path / "vlm")
    request = LoadRequest(str(model_file), 1024, profile, 0, str(mmproj))
    loaded = engine.call(engine.worker.load_planned(request))
    assert isinstance(loaded, ModelLoaded) and loaded.vision is not None
    changed = engine.call(engine.worker.set_budget(2 << 30))
    assert isinstance(changed, PlanChanged)
    image = Image.new("RGB", (40, 30), "red")
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    seen = engine.call(
        engine.worker.send_message("Colour?", SHORT, [ImageFile("red.png", buffer.getvalue())])
    )
    assert isinstance(seen, ReplyFinished) and seen.stats.prompt_tokens > 16


# --- a placement chosen by hand (issue 13) ---


def _until_final(engine: Engine, request_id: int) -> list:
    """Every event of one request, its final one last."""
    seen, deadline = [], time.monotonic() + 60
    while True:
        event = engine.events.get(timeout=max(deadline - time.monotonic(), 0.01))
        if getattr(event, "request_id", None) == request_id:
            seen.append(event)
            if isinstance(event, FINAL_EVENTS):
                return seen


def test_a_manual_placement_is_kept_across_budgets_it_fits_and_falls_back_when_not(
    engine, default_model_file: Path, monkeypatch
) -> None:
    # a GPU plan on this CPU build: the "GPU" buffer type is the CPU's, so it loads here
    monkeypatch.setattr(plan_execution, "_gpu_buffer_type", lambda: "CPU")
    recorded = Profile.from_json(RECORDED.read_text())
    profile = replace(recorded, gpu=load_described("laptop-8gb").gpu)
    inventory = read_inventory(default_model_file)
    every_layer = PlacementChoice.parse("layers:31")  # 30 blocks and the output layer
    plan = plan_for_choice(inventory, profile, PlanRequest(2 << 30, n_ctx=1024), every_layer)
    params = load_params_for_plan(plan, inventory, str(default_model_file))
    assert params.n_gpu_layers == 31
    engine.call(engine.worker.load_model(params, plan, profile))
    engine.call(engine.worker.send_message("My name is Ada.", SHORT))

    kept = _until_final(engine, engine.worker.set_budget(3 << 30))
    assert [type(e) for e in kept] == [PlanChanged]
    assert kept[0].plan.extras["placement"] == "layers:31" and not kept[0].reloaded

    too_small = plan.vram.total_bytes - (1 << 20)  # the margin is the same 128 MiB here
    events = _until_final(engine, engine.worker.set_budget(too_small))
    assert [type(e) for e in events] == [PlacementFellBack, PlanChanged]
    fell, changed = events
    assert fell.requested == "layers:31" and "layers:31 needs" in fell.message
    assert changed.plan.extras["placement"] == "auto" and changed.reloaded
    assert changed.plan.vram.total_bytes <= too_small

    back = _until_final(engine, engine.worker.set_budget(2 << 30))
    assert [type(e) for e in back] == [PlanChanged]
    assert back[0].plan.extras["placement"] == "layers:31"
    assert back[0].plan.resident == plan.resident
    reply = engine.call(engine.worker.send_message("What is my name?", SHORT))
    assert isinstance(reply, ReplyFinished)


@pytest.fixture
def on_a_laptop_gpu(default_model_file: Path, monkeypatch):
    """The recorded profile with a described 8 GiB laptop GPU, and the default model's plan
    at `budget` under a placement; GPU plans load on this CPU build (the buffer type is CPU's)."""
    monkeypatch.setattr(plan_execution, "_gpu_buffer_type", lambda: "CPU")
    profile = replace(Profile.from_json(RECORDED.read_text()), gpu=load_described("laptop-8gb").gpu)
    inventory = read_inventory(default_model_file)

    def planned_at(budget: int, placement: str = "auto"):
        choice = PlacementChoice.parse(placement)
        plan = plan_for_choice(inventory, profile, PlanRequest(budget, n_ctx=1024), choice)
        return plan, load_params_for_plan(plan, inventory, str(default_model_file))

    return profile, planned_at


def test_a_placement_by_hand_replans_at_the_budget_and_says_what_the_planner_would_do(
    engine, on_a_laptop_gpu
) -> None:
    profile, planned_at = on_a_laptop_gpu
    plan, params = planned_at(2 << 30)
    engine.call(engine.worker.load_model(params, plan, profile))
    first = engine.call(engine.worker.send_message("My name is Ada.", SHORT))

    events = _until_final(engine, engine.worker.set_placement(PlacementChoice.parse("layers:8")))
    assert [type(e) for e in events] == [PlanChanged]
    changed = events[0]
    assert changed.plan.extras["placement"] == "layers:8"
    assert changed.reloaded and changed.vram_budget_bytes == 2 << 30  # the budget stays
    assert changed.plan.extras["n_layer"] == 30 and changed.plan.extras["is_moe"] is False
    planner = changed.planner_plan
    assert planner is not None and planner.extras["placement"] == "auto"
    assert planner.resident == plan.resident  # what the planner chose at load, made again
    assert planner.predicted_decode_tokens_per_s == plan.predicted_decode_tokens_per_s

    second = engine.call(engine.worker.send_message("What is my name?", SHORT))
    assert isinstance(second, ReplyFinished)
    history = first.stats.prompt_tokens + first.stats.generated_tokens
    assert history < second.stats.prompt_tokens  # the conversation came along

    back = engine.call(engine.worker.set_placement(PlacementChoice.parse("auto")))
    assert isinstance(back, PlanChanged) and back.plan.extras["placement"] == "auto"
    assert back.planner_plan is None and back.plan.resident == plan.resident


def test_a_placement_that_does_not_fit_is_refused_and_the_model_stays(
    engine, on_a_laptop_gpu
) -> None:
    profile, planned_at = on_a_laptop_gpu
    every_layer, _ = planned_at(2 << 30, "layers:31")
    budget = every_layer.vram.total_bytes - (1 << 20)
    plan, params = planned_at(budget)
    engine.call(engine.worker.load_model(params, plan, profile))

    refused = engine.call(engine.worker.set_placement(PlacementChoice.parse("layers:31")))
    assert isinstance(refused, RequestFailed) and refused.bad_input
    assert "placement layers:31 needs" in refused.message and "\n" not in refused.message

    same = engine.call(engine.worker.set_budget(budget))  # what runs is what ran before
    assert isinstance(same, PlanChanged) and not same.reloaded
    assert same.plan.extras["placement"] == "auto" and same.plan.resident == plan.resident
    reply = engine.call(engine.worker.send_message("Hello", SHORT))
    assert isinstance(reply, ReplyFinished)


def test_set_placement_needs_a_planned_model(engine, default_model_file: Path) -> None:
    engine.call(engine.worker.load_model(LoadParams(str(default_model_file), n_ctx=512)))
    failed = engine.call(engine.worker.set_placement(PlacementChoice.parse("cpu")))
    assert isinstance(failed, RequestFailed) and failed.bad_input


# --- a projector's encoder and a budget change (issue 14) ---


def test_a_budget_change_with_a_projector_leaves_the_encoder_its_room(
    engine, on_a_laptop_gpu, tmp_path: Path
) -> None:
    """At 4 GiB a 7B model's plan leaves the encoder no room: VLMOpt shrinks the resident set
    at a load, and a budget change to 4 GiB must get the same smaller set, not the plain plan
    (shape-only files: llama.cpp maps them without reading, nothing is computed)."""
    profile, _planned_at = on_a_laptop_gpu
    model = write_shape_only_model(tmp_path / "qwen25vl-7b.gguf", QWEN25_VL_7B_TEXT, "Q4_K")
    mmproj = str(write_shape_only_projector(tmp_path / "mmproj.gguf", QWEN25_VL_7B))
    loaded = engine.call(engine.worker.load_planned(LoadRequest(str(model), 2048, profile,
                                                                8 << 30, mmproj)))  # fmt: skip
    assert isinstance(loaded, ModelLoaded) and loaded.vision is not None, loaded
    changed = engine.call(engine.worker.set_budget(4 << 30))
    assert isinstance(changed, PlanChanged), changed
    fresh = LoadRequest(str(model), 2048, profile, 4 << 30, mmproj).planned()
    plain = make_plan(read_inventory(model), profile, PlanRequest(4 << 30, n_ctx=2048))
    assert fresh.plan is not None and len(fresh.plan.resident) < len(plain.resident)
    assert changed.plan.resident == fresh.plan.resident and changed.reloaded
