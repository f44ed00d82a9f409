"""The batched engine's plain parts: prefix sharing, run totals, parallelism."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from engine.batch.results import BatchRequest, BatchResult, BatchStats, DecodeStep
from engine.batch.shared_prefix import SharedPrefix, common_prefix_length
from engine.generation.stats import FinishReason
from engine.machine.described_machines import load_described
from engine.machine.profile import Profile
from engine.model.chat_message import ChatMessage
from engine.model.inventory import read_inventory
from engine.planning.parallelism import PARALLEL_CHOICES, choose_parallelism
from engine.planning.plan import Objective, PlanRequest
from engine.planning.planner import make_plan

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "data" / "profile-epyc-2core-fast.json"
HEADER = list(range(100, 120))  # 20 tokens every prompt opens with


# --- shared prefix ---


def test_common_prefix_length() -> None:
    assert common_prefix_length([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix_length([1, 2], [1, 2, 3]) == 2
    assert common_prefix_length([], [1]) == 0
    assert common_prefix_length([9], [1]) == 0


def test_prefix_comes_from_the_first_two_prompts_and_keeps_one_token_out() -> None:
    prefix = SharedPrefix(min_tokens=8)
    assert prefix.candidate([HEADER + [1, 2]]) == ()  # one prompt says nothing yet
    shared = prefix.candidate([HEADER + [3, 4, 5]])  # the second one does
    assert shared == tuple(HEADER)
    prefix.tokens = shared
    assert prefix.candidate([HEADER + [6]]) == ()  # established: nothing more to evaluate
    assert prefix.reusable(HEADER + [7, 8]) == 20
    assert prefix.reusable(HEADER) == 19  # the last token is evaluated by its own sequence
    assert prefix.reusable(HEADER[:12] + [0] * 5) == 12
    assert prefix.reusable(HEADER[:5] + [0] * 5) == 0  # too little to be worth a copy
    assert prefix.reusable([0] * 30) == 0


def test_prompts_sharing_too_little_get_no_prefix() -> None:
    prefix = SharedPrefix(min_tokens=8)
    assert prefix.candidate([HEADER[:4] + [1] * 10, HEADER[:4] + [2] * 10]) == ()
    assert not prefix.established
    assert prefix.reusable(HEADER) == 0


# --- run totals ---


def test_stats_split_mixed_steps_by_token_share_and_count_results() -> None:
    stats = BatchStats()
    stats.add_step(
        DecodeStep(n_tokens=100, n_sequences=4, tier=None, seconds=1.0, n_prompt_tokens=96)
    )
    stats.add_step(DecodeStep(n_tokens=4, n_sequences=4, tier=None, seconds=0.5))
    assert stats.prompt_seconds == pytest.approx(0.96)
    assert stats.decode_seconds == pytest.approx(0.54)
    assert stats.evaluated_prompt_tokens == 96 and stats.steps == 2
    stats.add_result(BatchResult("a", "x", 50, 8, 1.0, FinishReason.STOP, reused_prompt_tokens=20))
    stats.add_result(BatchResult("b", "", 900, 0, 0.0, FinishReason.ERROR, "too long"))
    assert (stats.n_results, stats.prompt_tokens, stats.reused_prompt_tokens) == (2, 50, 20)
    assert stats.finish_reasons == {"stop": 1, "error": 1}
    assert stats.generated_tokens_per_s == pytest.approx(8 / 0.54)


def test_result_values_load_without_llama_cpp() -> None:
    """The GUI may hold results and totals; that must not load the inference library."""
    script = "import sys, engine.batch.results; print('llama_cpp' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "False"


def test_a_request_needs_messages_and_a_positive_limit() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        BatchRequest("a", (ChatMessage("user", "hi"),), 0)
    with pytest.raises(ValueError, match="message"):
        BatchRequest("a", (), 8)


# --- parallelism ---


@pytest.fixture(scope="module")
def cpu_setup(default_model_file: Path):
    profile = Profile.from_json(RECORDED.read_text())
    inventory = read_inventory(default_model_file)
    request = PlanRequest(0, n_ctx=1024, n_parallel=16, objective=Objective.BATCH)
    return make_plan(inventory, profile, request), profile, inventory


def test_planner_picks_the_best_predicted_aggregate_speed(cpu_setup) -> None:
    plan, profile, inventory = cpu_setup
    choice = choose_parallelism(plan, profile, inventory, n_documents=24, n_ctx_per_sequence=1024)
    assert set(choice.predicted_tokens_per_s) == set(PARALLEL_CHOICES)
    best = max(choice.predicted_tokens_per_s.values())
    assert choice.predicted_tokens_per_s[choice.n_parallel] == best
    # measured here: 16 sequences decode about twice as fast in aggregate as one
    assert choice.n_parallel == 16
    assert choice.predicted_tokens_per_s[16] > 1.5 * choice.predicted_tokens_per_s[1]
    assert "16 sequences" in choice.reason


def test_parallelism_is_capped_by_documents_and_memory(cpu_setup) -> None:
    plan, profile, inventory = cpu_setup
    assert choose_parallelism(plan, profile, inventory, 3, 1024).n_parallel <= 3
    assert choose_parallelism(plan, profile, inventory, 1, 1024).n_parallel == 1
    per_sequence = inventory.kv_cache_bytes(1024)
    tight = choose_parallelism(plan, profile, inventory, 24, 1024, kv_budget_bytes=5 * per_sequence)
    assert tight.memory_cap == 4 and tight.n_parallel <= 4


def test_a_gpu_plan_caps_parallelism_by_the_vram_left_for_kv(default_model_file: Path) -> None:
    laptop = load_described("laptop-8gb")
    inventory = read_inventory(default_model_file)
    plan = make_plan(inventory, laptop, PlanRequest(1 << 30, n_ctx=1024, n_parallel=16))
    assert plan.vram.kv_cache_bytes > 0
    per_sequence = plan.vram.kv_cache_bytes  # n_ctx_per_sequence == the plan's n_ctx
    squeezed = replace(plan, vram=replace(plan.vram, budget_bytes=plan.vram.total_bytes
                                          + 2 * per_sequence))  # fmt: skip
    choice = choose_parallelism(squeezed, laptop, inventory, 24, 1024, kv_budget_bytes=1 << 40)
    assert choice.memory_cap == 2 and choice.n_parallel <= 2
