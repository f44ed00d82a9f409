"""The VRAM panel's figures, from real plans on described and recorded machines."""

from __future__ import annotations

from dataclasses import replace

from app.screen_text.vram_overview import BATCH_SEQUENCES, NO_PLAN, vram_overview
from engine.machine.datasheets import DESCRIBED_MACHINES
from engine.machine.described_machines import described_hardware, load_described
from engine.model.inventory import read_inventory
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan


def laptop_gpu(others: int = 0):
    gpu = described_hardware(DESCRIBED_MACHINES["laptop-8gb"]).gpus[0]
    return replace(gpu, vram_used_bytes=others + (300 << 20), other_processes_bytes=others)


def test_the_overview_shows_how_the_plan_spends_the_budget(default_model_file) -> None:
    plan = make_plan(
        read_inventory(default_model_file), load_described("laptop-8gb"), PlanRequest(1 << 30)
    )
    view = vram_overview(plan, laptop_gpu(others=2 << 30))
    assert view.has_gpu and view.vram_total_bytes == 8 << 30 and view.budget_bytes == 1 << 30
    assert [s.label for s in view.resident] == ["weights", "KV cache", "compute buffers", "margin"]
    assert view.planned_bytes == plan.vram.total_bytes <= view.budget_bytes
    assert view.resident[0].n_bytes == plan.vram.weights_bytes > 0
    assert view.others_used_bytes == 2 << 30 and view.shardchat_used_bytes == 300 << 20
    assert view.chat_tokens_per_s == plan.predicted_decode_tokens_per_s
    batch_tier = next(t for t in plan.tiers if t.tier == plan.tier_for(BATCH_SEQUENCES))
    assert view.batch_tokens_per_s == batch_tier.tokens_per_s > view.chat_tokens_per_s
    assert view.family == plan.family_for(1).value.replace("_", " ")
    assert view.backend == "CUDA" and not view.integrated  # a described NVML GPU


def test_without_a_gpu_the_overview_says_why_and_still_shows_the_cpu_plan(
    default_model_file,
) -> None:
    inventory = read_inventory(default_model_file)
    plan = make_plan(inventory, load_described("laptop-8gb"), PlanRequest(0))
    reason = "no GPU found by NVML or ggml (NVML: NVIDIA driver not found (libnvidia-ml); ..."
    view = vram_overview(plan, None, reason)
    assert not view.has_gpu and view.no_gpu_reason == reason and view.backend is None
    assert view.shardchat_used_bytes is None and view.planned_bytes == 0
    assert view.family == "cpu only" and view.chat_tokens_per_s > 0


def test_a_budget_being_applied_is_shown_over_the_plans_and_no_plan_is_said(
    default_model_file,
) -> None:
    view = vram_overview(None, laptop_gpu(), budget_bytes=3 << 30)
    assert view.budget_bytes == 3 << 30 and view.family == NO_PLAN
    assert view.chat_tokens_per_s is None and view.resident == ()


def test_a_gpu_only_ggml_sees_shows_its_backend_and_whose_use_is_unknown() -> None:
    radeon = replace(
        laptop_gpu(),
        name="AMD Radeon RX 7600 (RADV NAVI33)",
        uuid="",
        vram_used_bytes=1 << 30,
        other_processes_bytes=0,
        backend="Vulkan",
        ggml_device="Vulkan0",
        other_processes_known=False,
    )
    view = vram_overview(None, radeon)
    assert view.has_gpu and view.backend == "Vulkan (Vulkan0)"
    assert view.others_used_bytes is None and view.shardchat_used_bytes is None
    assert view.gpu_used_bytes == 1 << 30
    integrated = vram_overview(None, replace(radeon, integrated=True))
    assert integrated.integrated


def test_without_a_reason_the_overview_says_no_gpu_found() -> None:
    assert vram_overview(None, None).no_gpu_reason == "no GPU found"
