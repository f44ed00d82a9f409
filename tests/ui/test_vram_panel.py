"""The VRAM panel names the GPU's llama.cpp backend and device, and says what it cannot know.

Built from overviews of GPUs as engine.machine.hardware reports them: a described NVIDIA
laptop GPU (NVML's figures) and Mesa's lavapipe, a Vulkan device only ggml sees.
The placement row (issue 13) is checked on plans of the default model, and against
the real worker: the recorded 2-core profile with the described laptop GPU.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

import engine.planning.execution as plan_execution
from app.engine_host.worker import EngineWorker
from app.screen_text.plan_words import (
    NOT_PROFILED_DETAILS,
    decode_correction,
    plan_details,
    predicted_decode_tps,
    speed_against_plan,
)
from app.screen_text.units import format_bytes, speed_text
from app.screen_text.vram_overview import vram_overview
from app.stores.profile_store import ProfileStore, model_key
from engine.generation.sampling import GREEDY
from engine.machine.datasheets import DESCRIBED_MACHINES
from engine.machine.described_machines import described_hardware, load_described
from engine.machine.profile import Profile
from engine.model.inventory import read_inventory
from engine.planning.placement_choice import PlacementChoice, load_params_for_plan, plan_for_choice
from engine.planning.plan import Plan, PlanFamily, PlanRequest
from engine.planning.step_correction import CorrectionKey
from ui.engine_bridge import EngineBridge
from ui.vram.vram_controller import VramController
from ui.vram.vram_panel import VramPanel

GIB = 1 << 30
TIMEOUT_MS = 60_000


def nvidia_laptop():
    gpu = described_hardware(DESCRIBED_MACHINES["laptop-8gb"]).gpus[0]
    return replace(gpu, vram_used_bytes=GIB + GIB // 2, other_processes_bytes=GIB)


def lavapipe():
    """What the probe reports for lavapipe under the Vulkan build (tests/gpu checks it)."""
    return replace(
        nvidia_laptop(),
        name="llvmpipe (LLVM 15.0.6, 256 bits)",
        uuid="",
        vram_total_bytes=2 * GIB,
        vram_free_bytes=2 * GIB - GIB // 4,
        vram_used_bytes=GIB // 4,
        other_processes_bytes=0,
        pcie_generation_current=None,
        pcie_generation_max=None,
        pcie_width_current=None,
        pcie_width_max=None,
        backend="Vulkan",
        ggml_device="Vulkan0",
        other_processes_known=False,
    )


def panel_showing(qtbot, gpu) -> VramPanel:
    panel = VramPanel()
    qtbot.addWidget(panel)
    panel.show_overview(vram_overview(None, gpu))
    return panel


def test_an_nvidia_gpu_shows_its_backend_and_who_uses_its_vram(qtbot) -> None:
    panel = panel_showing(qtbot, replace(nvidia_laptop(), ggml_device="CUDA0"))
    assert panel.explanation.text() == "NVIDIA GeForce RTX 4060 Laptop GPU — CUDA (CUDA0), 8.0 GiB"
    assert panel.live.text() == "ShardChat 512.0 MiB · other programs 1.0 GiB · of 8.0 GiB"
    assert panel.slider.isEnabled() and panel.slider.maximum() == 8 << 10


def test_a_vulkan_gpu_shows_its_device_and_use_without_owners(qtbot) -> None:
    panel = panel_showing(qtbot, lavapipe())
    assert panel.explanation.text() == (
        "llvmpipe (LLVM 15.0.6, 256 bits) — Vulkan (Vulkan0), 2.0 GiB"
    )
    assert panel.live.text() == "in use 256.0 MiB (ShardChat and other programs) · of 2.0 GiB"
    assert panel.slider.isEnabled() and panel.slider.maximum() == 2 << 10
    assert "other programs" not in [label for label, _ in panel.bar.segments()]


def test_an_integrated_gpu_says_its_memory_is_system_ram(qtbot) -> None:
    iris = replace(lavapipe(), name="Intel(R) Iris(R) Xe Graphics", integrated=True)
    panel = panel_showing(qtbot, iris)
    assert panel.explanation.text().endswith(
        "— Vulkan (Vulkan0), 2.0 GiB of system RAM (integrated GPU)"
    )


def test_without_a_gpu_the_panel_says_so(qtbot) -> None:
    panel = panel_showing(qtbot, None)
    assert panel.explanation.text() == "no GPU found: the model runs on the CPU."
    assert panel.live.text() == "no GPU" and not panel.slider.isEnabled()


# --- the placement row (issue 13) ---


def laptop_profile(recorded: Profile) -> Profile:
    """The recorded 2-core profile with the described 8 GB laptop's GPU."""
    return replace(recorded, gpu=load_described("laptop-8gb").gpu)


@pytest.fixture(scope="module")
def plan_at(default_model_file: Path, recorded_profile):
    """The default model's plan at a budget under a placement, as the worker makes it."""
    inventory, profile = read_inventory(default_model_file), laptop_profile(recorded_profile)

    def plan_at(budget: int, placement: str = "auto") -> Plan:
        choice = PlacementChoice.parse(placement)
        plan = plan_for_choice(inventory, profile, PlanRequest(budget, n_ctx=1024), choice)
        shape = {"n_layer": len(inventory.blocks), "is_moe": inventory.is_moe}
        return replace(plan, extras={**plan.extras, **shape})

    return plan_at


def predicted(plan: Plan) -> str:
    return (
        f"{speed_text(plan.predicted_decode_tokens_per_s)}, {plan.predicted_ttft_s:.2f} s, "
        f"{format_bytes(plan.vram.total_bytes)}"
    )


def test_the_panel_sets_the_planners_prediction_beside_a_manual_one(qtbot, plan_at) -> None:
    planner, yours = plan_at(2 * GIB), plan_at(2 * GIB, "layers:8")
    assert predicted(planner) != predicted(yours)
    panel = VramPanel()
    qtbot.addWidget(panel)
    panel.show_overview(vram_overview(yours, nvidia_laptop(), planner_plan=planner))
    assert panel.comparison.text() == (
        f"planner: {predicted(planner)} · yours (layers:8): {predicted(yours)}"
    )
    assert panel.placement.currentText() == "Whole layers on the GPU"
    assert panel.placement_count.value() == 8 and panel.placement_count.isEnabled()
    assert panel.placement_count.maximum() == 31  # 30 blocks and the output layer
    assert panel.placement.findData("cpu-moe") == -1  # a dense model: no experts to place

    panel.show_overview(vram_overview(planner, nvidia_laptop()))
    assert panel.comparison.text() == f"planner: {predicted(planner)}"
    assert panel.placement.currentData() == "auto" and not panel.placement_count.isEnabled()


def test_a_choice_is_reported_on_apply_only_and_survives_the_refresh(qtbot, plan_at) -> None:
    panel = VramPanel()
    qtbot.addWidget(panel)
    view = vram_overview(plan_at(2 * GIB), nvidia_laptop())
    panel.show_overview(view)
    with qtbot.assertNotEmitted(panel.placement_chosen):
        panel.placement.setCurrentIndex(panel.placement.findData("layers"))
        panel.placement_count.setValue(12)
        panel.show_overview(view)  # the once-a-second refresh
    assert panel.placement.currentData() == "layers" and panel.placement_count.value() == 12
    with qtbot.waitSignal(panel.placement_chosen) as chosen:
        panel.apply_placement.click()
    assert chosen.args == ["layers:12"]


def test_without_a_gpu_the_placement_row_is_off_and_says_why(qtbot, plan_at) -> None:
    panel = VramPanel()
    qtbot.addWidget(panel)
    panel.show_overview(vram_overview(plan_at(0, "cpu"), None, "no GPU found by NVML or ggml"))
    reason = "no GPU found by NVML or ggml: the model runs on the CPU."
    assert panel.explanation.text() == reason  # what the slider's row says
    for widget in (panel.placement, panel.placement_count, panel.apply_placement):
        assert not widget.isEnabled() and widget.toolTip() == reason
    assert panel.comparison.text() == reason


@pytest.fixture
def vram_desk(qtbot, default_model_file: Path, monkeypatch, recorded_profile):
    """The panel and its controller on the real worker, with the default model loaded at
    `budget` under the planner's choice; GPU plans load on this CPU build."""
    monkeypatch.setattr(plan_execution, "_gpu_buffer_type", lambda: "CPU")
    bridge = EngineBridge()
    worker = EngineWorker(bridge).start()
    asked: list[PlacementChoice] = []
    set_placement = worker.set_placement
    monkeypatch.setattr(worker, "set_placement", lambda c: asked.append(c) or set_placement(c))
    panel = VramPanel()
    qtbot.addWidget(panel)
    controller = VramController(panel, worker, bridge, None, lambda: (nvidia_laptop(), ""))
    messages: list[str] = []
    controller.message.connect(messages.append)
    inventory, profile = read_inventory(default_model_file), laptop_profile(recorded_profile)

    def load(budget: int) -> Plan:
        plan = plan_for_choice(inventory, profile, PlanRequest(budget, n_ctx=1024))
        params = load_params_for_plan(plan, inventory, str(default_model_file))
        with qtbot.waitSignal(bridge.model_loaded, timeout=TIMEOUT_MS):
            worker.load_model(params, plan, profile)
        controller.use_plan(plan)
        return plan

    yield panel, controller, bridge, load, asked, messages
    controller.shutdown()
    worker.shutdown()


def test_applying_whole_layers_replans_under_that_placement(qtbot, vram_desk) -> None:
    panel, controller, bridge, load, asked, messages = vram_desk
    loaded = load(2 * GIB)
    assert panel.placement.isEnabled() and panel.placement.currentData() == "auto"
    panel.placement.setCurrentIndex(panel.placement.findData("layers"))
    panel.placement_count.setValue(8)
    with qtbot.waitSignal(bridge.plan_changed, timeout=TIMEOUT_MS) as changed:
        panel.apply_placement.click()
    assert asked == [PlacementChoice.parse("layers:8")]
    event = changed.args[0]
    assert event.plan.extras["placement"] == "layers:8" and controller.plan is event.plan
    assert messages[-1] == "placement layers:8: model reloaded"
    assert panel.comparison.text() == (
        f"planner: {predicted(event.planner_plan)} · yours (layers:8): {predicted(event.plan)}"
    )
    assert predicted(event.planner_plan) == predicted(loaded)  # the planner's, made again
    assert panel.placement.currentData() == "layers" and panel.placement_count.value() == 8


def test_a_placement_over_the_budget_says_why_and_changes_nothing(
    qtbot, vram_desk, plan_at
) -> None:
    panel, controller, bridge, load, asked, messages = vram_desk
    every_layer = plan_at(2 * GIB, "layers:31")
    loaded = load(every_layer.vram.total_bytes - (1 << 20))
    shown = panel.comparison.text()
    panel.placement.setCurrentIndex(panel.placement.findData("layers"))
    panel.placement_count.setValue(31)
    with qtbot.waitSignal(bridge.request_failed, timeout=TIMEOUT_MS) as failed:
        panel.apply_placement.click()
    assert asked == [PlacementChoice.parse("layers:31")] and failed.args[0].bad_input
    assert messages[-1] == f"the placement was not applied: {failed.args[0].message}"
    assert "placement layers:31 needs" in messages[-1] and "\n" not in messages[-1]
    assert controller.plan is loaded and controller.planner_plan is None
    assert panel.placement.currentData() == "auto"  # back to what runs
    assert panel.comparison.text() == shown


def test_the_counts_range_follows_the_kind_and_experts_are_offered_for_moe(qtbot, plan_at) -> None:
    panel = VramPanel()
    qtbot.addWidget(panel)
    plan = plan_at(2 * GIB)
    moe = replace(plan, extras={**plan.extras, "n_layer": 24, "is_moe": True})
    panel.show_overview(vram_overview(moe, nvidia_laptop()))
    panel.placement.setCurrentIndex(panel.placement.findData("cpu-moe"))
    assert panel.placement.currentText() == "MoE experts of N blocks on the CPU"
    assert panel.placement_count.isEnabled() and panel.placement_count.maximum() == 24
    panel.placement.setCurrentIndex(panel.placement.findData("layers"))
    assert panel.placement_count.maximum() == 25
    panel.placement.setCurrentIndex(panel.placement.findData("cpu"))
    assert not panel.placement_count.isEnabled()


# --- the plan in plain words, and the last reply's speed (issue 16) ---


def test_the_panel_says_in_words_what_the_gpu_holds_and_what_the_cpu_computes(
    qtbot, plan_at
) -> None:
    panel = VramPanel()
    qtbot.addWidget(panel)
    whole = plan_at(2 * GIB)
    panel.show_overview(vram_overview(whole, nvidia_laptop()))
    assert panel.plan_words.text() == "\n".join(plan_details(whole))
    assert panel.plan_words.text().startswith("The GPU holds the whole model: all 30 layers")
    by_hand = plan_at(2 * GIB, "layers:8")
    panel.show_overview(vram_overview(by_hand, nvidia_laptop(), planner_plan=whole))
    k = by_hand.n_gpu_layers  # blocks: llama.cpp's 8 counts the output layer too
    assert panel.plan_words.text().startswith(f"The GPU holds {k} of 30 layers and the output")
    # the rest streams for each token where the backend's boundary lets it, else the CPU
    streams = plan_execution.executable_plan(by_hand).family_for(1) is PlanFamily.GPU_ONLY
    rest = f"({30 - k} layers) cross PCIe" if streams else f"computes {30 - k} layers;"
    assert rest in panel.plan_words.text().split("\n")[2]
    panel.show_overview(vram_overview(None, nvidia_laptop()))
    assert panel.plan_words.text() == "\n".join(NOT_PROFILED_DETAILS)


def test_the_last_replys_speed_stays_beside_the_prediction_across_refreshes(qtbot, plan_at) -> None:
    panel = VramPanel()
    qtbot.addWidget(panel)
    plan = plan_at(2 * GIB, "layers:8")
    view = vram_overview(plan, nvidia_laptop())
    panel.show_overview(view)
    assert panel.last_speed.text() == "–"  # no reply yet
    # the prediction as the plan runs (the backend's op-offload boundary may not be the plan's)
    predicted = plan_execution.executable_plan(plan).predicted_decode_tokens_per_s
    measured = predicted * 0.8
    panel.show_last_speed(speed_against_plan(measured, plan))
    panel.show_overview(view)  # the once-a-second refresh keeps it
    assert panel.last_speed.text() == (
        f"{speed_text(measured, 'tokens/s')} (plan predicted {predicted:.1f}, 80%)"
    )
    # the row above
    assert panel.chat.text().startswith(f"{speed_text(predicted, 'tokens/s')} predicted")
    panel.show_last_speed("")
    assert panel.last_speed.text() == "–"


# --- what the steps taught the cost model (issue 29) ---


def test_a_reply_corrects_the_prediction_and_the_next_load_goes_on_from_it(
    qtbot, vram_desk, default_model_file: Path, recorded_profile
) -> None:
    panel, controller, bridge, load, _asked, _messages = vram_desk
    plan = load(2 * GIB)
    model_tps = predicted_decode_tps(plan)
    assert model_tps is not None
    said = re.escape(speed_text(model_tps, "tokens/s"))
    not_yet = rf"{said} predicted \(±\d+% on [\w-]+ machines\), "  # how sure
    assert re.match(not_yet, panel.chat.text()), panel.chat.text()
    with qtbot.waitSignal(bridge.reply_finished, timeout=TIMEOUT_MS) as finished:
        controller.worker.send_message("Name three colours.", GREEDY.with_changes(max_tokens=12))
    decode = decode_correction(plan, finished.args[0].steps)
    assert decode is not None and decode.steps >= 5
    corrected = model_tps / decode.factor
    assert panel.chat.text().startswith(
        f"{speed_text(corrected, 'tokens/s')} predicted (corrected from {model_tps:.0f} after "
        f"{decode.steps} steps), "
    )
    load(2 * GIB)  # the model is closed, what it learned kept, and loaded again
    assert "corrected" not in panel.chat.text()  # a load starts the panel afresh
    key = CorrectionKey(plan_execution.executable_plan(plan).family_for(1), plan.tier_for(1))
    with ProfileStore() as store:
        kept = store.corrections(laptop_profile(recorded_profile), model_key(default_model_file))
    assert kept[key] == decode
    with qtbot.waitSignal(bridge.reply_finished, timeout=TIMEOUT_MS) as finished:
        controller.worker.send_message("And three more.", GREEDY.with_changes(max_tokens=4))
    first = next(r for r in finished.args[0].steps if r.key == key)
    assert first.correction.steps == decode.steps + 1  # learning went on from the last session
    assert first.predicted_ms == pytest.approx(first.model_ms * decode.factor)
