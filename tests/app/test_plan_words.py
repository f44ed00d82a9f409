"""The plan in plain words, checked against real plans from the real planner.

Plans are made as the app makes them (plan_for_choice) on the described 8 GB laptop
for the default model (it fits whole), a shape-only 32-block dense model (it does not)
and a shape-only 48-block mixture of experts (its experts do not); every count the
words must say is read off the plan's resident set here, not written down.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from app.screen_text.plan_words import (
    NOT_PROFILED_DETAILS,
    NOT_PROFILED_WORDS,
    TOO_SHORT,
    plan_details,
    plan_in_words,
    predicted_decode_tps,
    speed_against_plan,
)
from app.screen_text.units import format_bytes, speed_text
from app.screen_text.vram_overview import vram_overview
from engine.llama import offload_boundary
from engine.machine.described_machines import load_described
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, SubLayerKind, read_inventory
from engine.model.synthetic import write_shape_only_model
from engine.model.synthetic_specs import LLAMA_3_8B_CTX_2K, QWEN3_30B_A3B
from engine.planning.execution import llama_gpu_layers
from engine.planning.placement_choice import PlacementChoice, plan_for_choice
from engine.planning.plan import Plan, PlanFamily, PlanRequest
from engine.planning.planner import make_plan

GIB = 1 << 30
ATTENTION, DENSE_FFN, EXPERTS = (
    SubLayerKind.ATTENTION,
    SubLayerKind.DENSE_FFN,
    SubLayerKind.ROUTED_EXPERTS,
)


@pytest.fixture(autouse=True)
def ggml_not_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans run with their own op-offload boundary until a test says the GPU backend
    started with another (other tests in this process may have started ggml)."""
    monkeypatch.setattr(offload_boundary, "_started_with", None)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, default_model_file: Path):
    folder = tmp_path_factory.mktemp("plan-words")
    return {
        "default": read_inventory(default_model_file),
        "dense": read_inventory(
            write_shape_only_model(folder / "dense.gguf", LLAMA_3_8B_CTX_2K, "Q4_0")
        ),
        "moe": read_inventory(write_shape_only_model(folder / "moe.gguf", QWEN3_30B_A3B, "Q4_0")),
    }


@pytest.fixture(scope="module")
def laptop() -> Profile:
    return load_described("laptop-8gb")


@pytest.fixture
def plan_of(models: dict[str, ModelInventory], laptop: Profile):
    def plan_of(model: str, budget: int, placement: str = "auto") -> Plan:
        choice = PlacementChoice.parse(placement)
        return plan_for_choice(models[model], laptop, PlanRequest(budget), choice)

    return plan_of


def blocks_with(plan: Plan, kind: SubLayerKind) -> set[int]:
    return {block for block, k in plan.resident if k is kind and block is not None}


def vram(plan: Plan) -> str:
    return f"VRAM {format_bytes(plan.vram.total_bytes)} of {format_bytes(plan.vram.budget_bytes)}"


def test_a_model_that_fits_is_all_on_the_gpu(plan_of, models) -> None:
    plan = plan_of("default", GIB)
    n = len(models["default"].blocks)
    assert blocks_with(plan, ATTENTION) == blocks_with(plan, DENSE_FFN) == set(range(n))
    assert plan_in_words(plan) == f"All {n} layers and the KV cache on the GPU · {vram(plan)}"
    assert plan_details(plan) == [
        f"The GPU holds the whole model: all {n} layers "
        f"({format_bytes(plan.vram.weights_bytes)} of weights).",
        f"The KV cache of all {n} layers is in VRAM ({format_bytes(plan.vram.kv_cache_bytes)}).",
        "Each new token: the GPU computes everything; no weights cross PCIe.",
    ]


def test_a_dense_model_partly_on_the_gpu_says_how_many_layers_each_side(plan_of) -> None:
    plan = plan_of("dense", 2 * GIB)
    on_gpu = blocks_with(plan, ATTENTION)
    k, n = len(on_gpu), LLAMA_3_8B_CTX_2K.n_layer
    assert 0 < k < n and blocks_with(plan, DENSE_FFN) == on_gpu  # whole layers
    assert plan.family_for(1) is PlanFamily.STATIC and plan.op_offload_min_batch < n * 1024
    assert plan_in_words(plan) == f"GPU: {k} of {n} layers + KV cache · CPU: {n - k} layers · " + (
        vram(plan)
    )
    streamed = next(t for t in plan.tiers if t.tier >= plan.op_offload_min_batch).chosen
    assert plan_details(plan) == [
        f"The GPU holds {k} of {n} layers and the output layer "
        f"({format_bytes(plan.vram.weights_bytes)} of weights).",
        f"The KV cache of {k} of {n} layers is in VRAM ({format_bytes(plan.vram.kv_cache_bytes)}"
        f"); the other {n - k} layers' is in system RAM.",
        f"Each new token: the CPU ({plan.n_threads} threads) computes {n - k} layers; the GPU "
        "computes the rest.",
        f"Steps of {plan.op_offload_min_batch} tokens or more (long prompts) stream the CPU's "
        f"share over PCIe instead ({format_bytes(streamed.streamed_bytes)} a step) and compute "
        "it on the GPU.",
    ]


def test_moe_experts_that_do_not_fit_are_computed_on_the_cpu(plan_of) -> None:
    plan = plan_of("moe", 7 * GIB)
    n, experts = QWEN3_30B_A3B.n_layer, len(blocks_with(plan, EXPERTS))
    assert blocks_with(plan, ATTENTION) == set(range(n)) and 0 < experts < n
    assert plan_in_words(plan) == (
        f"GPU: attention + KV cache of all {n} layers, experts of {experts} of {n} layers · "
        f"CPU: experts of {n - experts} layers · {vram(plan)}"
    )
    details = plan_details(plan)
    assert details[0] == (
        f"The GPU holds attention of all {n} layers, experts of {experts} of {n} layers and "
        f"the output layer ({format_bytes(plan.vram.weights_bytes)} of weights)."
    )
    assert details[2] == (
        f"Each new token: the CPU ({plan.n_threads} threads) computes experts of "
        f"{n - experts} layers; the GPU computes the rest."
    )


def test_a_small_budget_leaves_attention_and_the_head_on_the_cpu_too(plan_of) -> None:
    plan = plan_of("moe", GIB)
    n, attention = QWEN3_30B_A3B.n_layer, len(blocks_with(plan, ATTENTION))
    assert 0 < attention < n and not blocks_with(plan, EXPERTS)
    assert (None, SubLayerKind.OUTPUT_HEAD) not in plan.resident
    assert plan_in_words(plan) == (
        f"GPU: attention + KV cache of {attention} of {n} layers · CPU: attention of "
        f"{n - attention} layers, experts of all {n} layers, the output layer · {vram(plan)}"
    )
    assert plan_details(plan)[1].endswith(f"the other {n - attention} layers' is in system RAM.")


def test_whole_layers_by_hand_count_blocks_not_llama_cpps_output_layer(plan_of) -> None:
    plan = plan_of("dense", 4 * GIB, "layers:10")
    k = len(blocks_with(plan, ATTENTION))
    assert llama_gpu_layers(k) == 10  # llama.cpp counts the output layer as one more
    assert plan_in_words(plan).startswith(f"GPU: {k} of 32 layers + KV cache · CPU: {32 - k}")


def test_a_backend_that_streams_from_one_token_says_the_weights_cross_pcie(
    plan_of, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_of("dense", 2 * GIB)
    k, n = len(blocks_with(plan, ATTENTION)), LLAMA_3_8B_CTX_2K.n_layer
    monkeypatch.setattr(offload_boundary, "_started_with", 1)  # GGML_OP_OFFLOAD_MIN_BATCH=1
    streamed = next(e for e in plan.tiers[0].others if e.family is PlanFamily.GPU_ONLY)
    assert plan_in_words(plan) == (
        f"GPU: {k} of {n} layers + KV cache · streamed over PCIe: {n - k} layers · {vram(plan)}"
    )
    assert plan_details(plan)[2] == (
        f"Each new token: {format_bytes(streamed.streamed_bytes)} of weights ({n - k} layers) "
        "cross PCIe from system RAM, and the GPU computes everything."
    )
    assert len(plan_details(plan)) == 3  # prompts stream too: nothing more to say
    assert predicted_decode_tps(plan) == streamed.tokens_per_s != plan.predicted_decode_tokens_per_s


def test_prompts_are_described_with_the_boundary_the_backend_runs(
    plan_of, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_of("moe", 7 * GIB)
    assert plan.op_offload_min_batch > 32
    assert plan_details(plan)[3].startswith(f"Steps of {plan.op_offload_min_batch} tokens")
    monkeypatch.setattr(offload_boundary, "_started_with", 32)  # llama.cpp's default
    assert plan_details(plan)[3].startswith("Steps of 32 tokens or more")
    assert predicted_decode_tps(plan) == plan.predicted_decode_tokens_per_s  # one token: CPU


def test_a_cpu_plan_says_nothing_is_in_vram_and_why(plan_of) -> None:
    plan = plan_of("moe", 0)
    assert not plan.resident
    assert plan_in_words(plan) == f"All {QWEN3_30B_A3B.n_layer} layers on the CPU · no VRAM used"
    assert plan_details(plan) == [
        f"Nothing in VRAM: the CPU ({plan.n_threads} threads) computes all {QWEN3_30B_A3B.n_layer} "
        "layers, and the KV cache is in system RAM.",
        f"Why: {plan.reason}.",
    ]


def test_a_plan_made_without_the_models_shape_still_counts_its_layers(models, laptop) -> None:
    plan = make_plan(models["dense"], laptop, PlanRequest(2 * GIB))
    assert "n_layer" not in plan.extras
    k = len(blocks_with(plan, ATTENTION))
    assert plan_in_words(plan).startswith(
        f"GPU: {k} of {LLAMA_3_8B_CTX_2K.n_layer} layers + KV cache"
    )


def test_without_a_plan_the_words_say_it_is_not_profiled() -> None:
    assert (
        plan_in_words(None)
        == NOT_PROFILED_WORDS
        == "CPU only (not profiled: run shardchat profile)"
    )
    assert plan_details(None) == list(NOT_PROFILED_DETAILS)
    assert predicted_decode_tps(None) is None
    assert speed_against_plan(12.34, None) == "12.3 tokens/s"


def test_a_replys_speed_is_set_beside_the_plans_prediction(plan_of) -> None:
    plan = plan_of("dense", 2 * GIB)
    predicted = predicted_decode_tps(plan)
    assert predicted == plan.predicted_decode_tokens_per_s > 0
    half = predicted / 2
    assert speed_against_plan(half, plan) == (
        f"{speed_text(half, 'tokens/s')} (plan predicted {predicted:.1f}, 50%)"
    )
    assert speed_against_plan(predicted * 1.25, plan).endswith(", 125%)")
    for unmeasured in (0.0, -1.0, math.nan, math.inf):
        assert speed_against_plan(unmeasured, plan) == TOO_SHORT


def test_the_vram_overview_carries_the_words(plan_of) -> None:
    plan = plan_of("dense", 2 * GIB)
    assert vram_overview(plan, None).plan_details == tuple(plan_details(plan))
    assert vram_overview(None, None).plan_details == NOT_PROFILED_DETAILS
