"""Working memory as a planning choice: flash attention and the ubatch, per budget.

Issue 29: at 16K context the attention scores of a 64-head model take 2 GiB of a
GPU at ubatch 512, so a 2 GiB budget fell back to the CPU (half an hour to the first
token of a 16K prompt). With flash attention the scores are never materialised, and
where even the logits of a ubatch do not fit, a smaller ubatch does.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.machine.described_machines import load_described
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, SubLayerKind, read_inventory
from engine.model.synthetic import write_shape_only_model
from engine.model.synthetic_spec import SyntheticSpec
from engine.model.synthetic_specs import QWEN3_235B_A22B
from engine.planning.cost_model import CostModel
from engine.planning.execution import placement_for
from engine.planning.plan import Plan, PlanFamily, PlanRequest
from engine.planning.planner import make_plan
from engine.planning.tier_costing import chunked_ttft
from engine.planning.vram_account import compute_bytes

GIB = 1 << 30
MIB = 1 << 20
# small blocks and a 262k vocabulary: the logits of a ubatch, not the weights, fill a budget
WIDE_VOCAB = SyntheticSpec(
    "llama", n_layer=8, n_embd=1024, n_head=16, n_head_kv=4, n_ff=4096, vocab_size=262144,
    context_length=8192,
)  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModelInventory]:
    folder = tmp_path_factory.mktemp("working-memory")
    return {
        "qwen3-235b": read_inventory(
            write_shape_only_model(folder / "qwen3-235b.gguf", QWEN3_235B_A22B, "Q2_K")
        ),
        "wide-vocab": read_inventory(
            write_shape_only_model(folder / "wide-vocab.gguf", WIDE_VOCAB, "Q4_0")
        ),
    }


@pytest.fixture(scope="module")
def rtx5090() -> Profile:
    return load_described("rtx5090-desktop")


@pytest.fixture(scope="module")
def qwen3_at_2_gib(models: dict[str, ModelInventory], rtx5090: Profile) -> Plan:
    request = PlanRequest(2 * GIB, n_ctx=16384, prompt_tokens=16384)
    return make_plan(models["qwen3-235b"], rtx5090, request)


def test_qwen3_235b_at_2_gib_and_16k_gets_a_gpu_plan_with_minutes_to_first_token(
    models: dict[str, ModelInventory], rtx5090: Profile, qwen3_at_2_gib: Plan
) -> None:
    inventory, plan = models["qwen3-235b"], qwen3_at_2_gib
    request = plan.request
    kinds = {kind for _block, kind in plan.resident}
    assert SubLayerKind.ATTENTION in kinds, plan.reason
    assert SubLayerKind.ROUTED_EXPERTS not in kinds
    assert plan.vram.kv_cache_bytes > 0 and plan.vram.total_bytes <= request.vram_budget_bytes
    assert plan.flash_attn
    cpu_only = make_plan(inventory, rtx5090, replace(request, vram_budget_bytes=0))
    assert plan.predicted_ttft_s < 10 * 60 < cpu_only.predicted_ttft_s
    assert plan.predicted_decode_tokens_per_s > cpu_only.predicted_decode_tokens_per_s


def test_a_budget_too_tight_for_the_logits_of_512_tokens_gets_a_smaller_ubatch(
    models: dict[str, ModelInventory], rtx5090: Profile
) -> None:
    inventory = models["wide-vocab"]
    request = PlanRequest(640 * MIB, n_ctx=4096)
    logits_512 = compute_bytes(inventory, request, 512, flash_attn=True)
    assert logits_512 >= 512 * MIB  # 262144 x 512 x 4 bytes: no room left at 512
    plan = make_plan(inventory, rtx5090, request)
    assert plan.n_ubatch < 512 and plan.flash_attn and plan.resident, plan.reason
    assert plan.vram.total_bytes <= request.vram_budget_bytes


def test_a_roomy_budget_keeps_a_ubatch_of_512_or_more(
    models: dict[str, ModelInventory], rtx5090: Profile
) -> None:
    inventory = models["wide-vocab"]
    plan = make_plan(inventory, rtx5090, PlanRequest(8 * GIB, n_ctx=4096, prompt_tokens=4096))
    assert plan.n_ubatch >= 512, plan.reason
    assert plan.reason == "the whole model fits the budget"


def test_a_smaller_ubatch_costs_a_streamed_prompt_more_steps(
    models: dict[str, ModelInventory], rtx5090: Profile, qwen3_at_2_gib: Plan
) -> None:
    """Each prompt step copies the streamed weights again: 4x the steps, nearly 4x the copies."""
    inventory, plan = models["qwen3-235b"], qwen3_at_2_gib
    streamed = placement_for(plan, PlanFamily.GPU_ONLY)
    model, threads = CostModel(rtx5090), plan.n_threads_batch
    at = {
        ubatch: chunked_ttft(inventory, model, streamed, threads, replace(plan, n_ubatch=ubatch))
        for ubatch in (128, 512)
    }
    assert at[128] > 3 * at[512]
