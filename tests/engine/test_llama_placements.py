"""llama.cpp's own placements (n_gpu_layers, --n-cpu-moe, --fit) as plans, and ours against them."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest

import engine.planning.execution as plan_execution
from engine.llama.load_params import LoadParams
from engine.machine.described_machines import load_described
from engine.machine.profile import Profile
from engine.model.inventory import (
    BlockInventory,
    ModelInventory,
    SubLayer,
    SubLayerKind,
    read_inventory,
)
from engine.model.synthetic import write_shape_only_model
from engine.model.synthetic_specs import LLAMA_3_8B_CTX_2K, QWEN3_30B_A3B
from engine.planning.execution import load_params_for
from engine.planning.llama_costing import FIT_MARGIN_BYTES, vram_account_of
from engine.planning.llama_fit import (
    FitLayers,
    _false_position_step,
    fit_baseline,
    fit_keys,
    fit_layers,
)
from engine.planning.llama_placements import (
    layer_offload_baseline,
    llama_cpp_baselines,
    n_cpu_moe_baseline,
    n_cpu_moe_keys,
)
from engine.planning.plan import Plan, PlanRequest
from engine.planning.planner import make_plan
from engine.planning.vram_account import fixed_vram

GIB = 1 << 30
MIB = 1 << 20
# llama.cpp's --n-cpu-moe pattern (common/common.h LLM_FFN_EXPS_REGEX), per block
EXPERT_TENSOR = re.compile(r"^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_(ch|)exps")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, ModelInventory]:
    folder = tmp_path_factory.mktemp("shape-only")
    return {
        "moe": read_inventory(write_shape_only_model(folder / "moe.gguf", QWEN3_30B_A3B, "Q4_0")),
        "dense": read_inventory(
            write_shape_only_model(folder / "dense.gguf", LLAMA_3_8B_CTX_2K, "F16")
        ),
    }


@pytest.fixture(scope="module")
def laptop() -> Profile:
    return load_described("laptop-8gb")


def _names(inventory: ModelInventory) -> list[str]:
    return [n for s in inventory.all_sublayers() for n in s.tensor_names]


def _on_gpu_in_llama_cpp(params: LoadParams, inventory: ModelInventory) -> set[str]:
    """The tensors this llama.cpp puts in VRAM under `params` (src/llama-model.cpp).

    n_gpu_layers=N offloads layers n_layer + 1 - N .. n_layer, the last being the
    output layer; the token embedding (input layer) stays on the CPU. The first
    override whose pattern regex_searches a tensor's name decides instead.
    """
    n = len(inventory.blocks)
    start = n + 1 - params.n_gpu_layers
    on_gpu = set()
    for sub in inventory.all_sublayers():
        for name in sub.tensor_names:
            match = next((b for p, b in params.tensor_overrides if re.search(p, name)), None)
            if match is not None:
                gpu = match != "CPU"
            elif sub.block is not None:
                gpu = sub.block >= start
            elif sub.kind is SubLayerKind.TOKEN_EMBEDDING:
                gpu = inventory.tied_output and n >= start  # the head's duplicate
            else:
                gpu = n >= start
            if gpu:
                on_gpu.add(name)
    return on_gpu


def _executes_as_planned(plan: Plan, inventory: ModelInventory, monkeypatch) -> LoadParams:
    monkeypatch.setattr(plan_execution, "_gpu_buffer_type", lambda: "CUDA0")
    params = load_params_for(plan, inventory, inventory.path)
    assert _on_gpu_in_llama_cpp(params, inventory) == set(plan.resident_tensor_names)
    assert params.op_offload_min_batch == plan.op_offload_min_batch
    return params


def _floor(profile: Profile) -> int:
    return profile.gpu.margin_floor_bytes


# --- --n-cpu-moe ---


def test_n_cpu_moe_keeps_exactly_the_experts_of_the_first_n_blocks_in_host_memory(
    models, laptop, monkeypatch
) -> None:
    inventory = models["moe"]
    plan = n_cpu_moe_baseline(inventory, laptop, PlanRequest(6 * GIB, n_ctx=4096))
    n_cpu = int(re.match(r"n_cpu_moe=(\d+) ", plan.reason).group(1))
    assert 0 < n_cpu < 48
    in_host = {
        name
        for name in _names(inventory)
        if (m := EXPERT_TENSOR.match(name)) and int(m.group(1)) < n_cpu
    }
    assert len(in_host) == 3 * n_cpu  # gate, up and down banks of each of those blocks
    expected = set(_names(inventory)) - in_host - {"token_embd.weight"}
    assert set(plan.resident_tensor_names) == expected
    assert "output.weight" in plan.resident_tensor_names
    assert plan.op_offload_min_batch == 32 and plan.n_ubatch == 512
    _executes_as_planned(plan, inventory, monkeypatch)


def test_n_cpu_moe_is_the_smallest_n_that_fits(models, laptop) -> None:
    inventory = models["moe"]
    for budget in (3 * GIB, 5 * GIB, 7 * GIB):
        request = PlanRequest(budget, n_ctx=8192)
        plan = n_cpu_moe_baseline(inventory, laptop, request)
        n_cpu = int(re.match(r"n_cpu_moe=(\d+) ", plan.reason).group(1))
        assert plan.vram.total_bytes <= budget
        assert set(plan.resident) == n_cpu_moe_keys(inventory, n_cpu)
        fewer = vram_account_of(inventory, request, n_cpu_moe_keys(inventory, n_cpu - 1))
        assert fewer.total_bytes > budget


def test_n_cpu_moe_is_for_moe_models_that_fit_it(models, laptop) -> None:
    assert n_cpu_moe_baseline(models["dense"], laptop, PlanRequest(6 * GIB)) is None
    # 16K of context for 48 blocks and the dense weights alone exceed 1.5 GiB
    assert (
        n_cpu_moe_baseline(models["moe"], laptop, PlanRequest(GIB + GIB // 2, n_ctx=16384)) is None
    )


# --- n_gpu_layers ---


@pytest.mark.parametrize("which", ["moe", "dense"])
def test_whole_layers_are_the_output_layer_and_the_last_blocks_the_budget_holds(
    models, laptop, which, monkeypatch
) -> None:
    inventory = models[which]
    n = len(inventory.blocks)
    request = PlanRequest(4 * GIB, n_ctx=4096)
    plan = layer_offload_baseline(inventory, laptop, request)
    ngl = int(re.match(r"n_gpu_layers=(\d+) of ", plan.reason).group(1))
    assert 1 < ngl <= n
    blocks = {b for b, kind in plan.resident if b is not None}
    assert blocks == set(range(n + 1 - ngl, n))
    assert {k for b, k in plan.resident if b is None} == {
        SubLayerKind.OUTPUT_HEAD,
        SubLayerKind.OUTPUT_NORM,
    }
    assert all((b, s.kind) in plan.resident for b in blocks for s in inventory.blocks[b].sublayers)
    one_more = {(b.index, s.kind) for b in inventory.blocks[n - ngl :] for s in b.sublayers}
    one_more |= {(None, SubLayerKind.OUTPUT_HEAD), (None, SubLayerKind.OUTPUT_NORM)}
    assert (
        vram_account_of(inventory, request, one_more, _floor(laptop)).total_bytes
        > request.vram_budget_bytes
    )
    params = _executes_as_planned(plan, inventory, monkeypatch)
    assert params.n_gpu_layers == ngl  # what the user typed


def test_a_model_that_fits_whole_gets_every_layer(models, monkeypatch) -> None:
    desktop = load_described("rtx5090-desktop")
    plan = layer_offload_baseline(models["moe"], desktop, PlanRequest(24 * GIB, n_ctx=1024))
    assert plan.reason.startswith("n_gpu_layers=49 of 49")
    assert plan.n_gpu_layers == 48  # blocks, as plan_execution counts them
    _executes_as_planned(plan, models["moe"], monkeypatch)


# --- every baseline ---


@pytest.mark.parametrize("which", ["moe", "dense"])
@pytest.mark.parametrize("n_ctx", [1024, 16384])
def test_every_baseline_accounts_for_what_it_places_and_fits_the_budget(
    models, laptop, which, n_ctx
) -> None:
    inventory = models[which]
    for budget in (GIB, 2 * GIB, 4 * GIB, 8 * GIB):
        request = PlanRequest(budget, n_ctx=n_ctx)
        for plan in llama_cpp_baselines(inventory, laptop, request):
            assert plan.vram.total_bytes <= budget, plan.reason
            if not plan.resident:
                continue
            weights = sum(
                s.n_bytes for s in inventory.all_sublayers() if (s.block, s.kind) in plan.resident
            )
            kv = sum(
                inventory.blocks[b].kv_cache_bytes(n_ctx)
                for b, kind in plan.resident
                if kind is SubLayerKind.ATTENTION
            )
            fixed = fixed_vram(inventory, request, 512, _floor(laptop))
            assert (plan.vram.weights_bytes, plan.vram.kv_cache_bytes) == (weights, kv)
            assert (plan.vram.compute_bytes, plan.vram.margin_bytes) == (
                fixed["compute"],
                fixed["margin"],
            )


def test_fit_plans_execute_as_planned(models, laptop, monkeypatch) -> None:
    for which, budget in (("moe", 6 * GIB), ("moe", 2 * GIB), ("dense", 4 * GIB)):
        plan = fit_baseline(models[which], laptop, PlanRequest(budget, n_ctx=4096))
        assert plan.reason.startswith("llama.cpp fit: ") and plan.resident
        _executes_as_planned(plan, models[which], monkeypatch)


# --- --fit, traced by hand through common/fit.cpp ---


def _sub(kind: SubLayerKind, block: int | None, mib: int, name: str) -> SubLayer:
    return SubLayer(kind, block, mib * MIB, mib * MIB // 2, (name,), ("F16",))


def _round_model(moe: bool) -> ModelInventory:
    """Four blocks of round sizes and no KV cache, so fit's arithmetic can be done by hand.

    MoE: attention 100 MiB, router 10 MiB, experts 400 MiB per block; dense:
    attention 100 MiB and FFN 300 MiB. The output head is 50 MiB either way.
    """
    blocks = []
    for i in range(4):
        subs = [_sub(SubLayerKind.ATTENTION, i, 100, f"blk.{i}.attn_q.weight")]
        if moe:
            subs += [
                _sub(SubLayerKind.MOE_ROUTER, i, 10, f"blk.{i}.ffn_gate_inp.weight"),
                _sub(SubLayerKind.ROUTED_EXPERTS, i, 400, f"blk.{i}.ffn_up_exps.weight"),
            ]
        else:
            subs.append(_sub(SubLayerKind.DENSE_FFN, i, 300, f"blk.{i}.ffn_up.weight"))
        blocks.append(BlockInventory(i, tuple(subs), kv_bytes_per_token=0))
    return ModelInventory(
        path="round.gguf", file_bytes=0, architecture="qwen3moe" if moe else "llama",
        name="round", n_params=0, context_length=4096, n_embd=256, n_layer=4, n_head=4,
        n_head_kv=4, n_vocab=1000, expert_count=8 if moe else 0, expert_used_count=2 if moe else 0,
        blocks=tuple(blocks),
        globals=(
            _sub(SubLayerKind.TOKEN_EMBEDDING, None, 50, "token_embd.weight"),
            _sub(SubLayerKind.OUTPUT_HEAD, None, 50, "output.weight"),
        ),
    )  # fmt: skip


def _for_weights(inventory: ModelInventory, weights_mib: int) -> PlanRequest:
    """The budget whose fit target (free memory - 1 GiB) leaves `weights_mib` for weights."""
    probe = PlanRequest(4 * GIB, n_ctx=256)
    compute = fixed_vram(inventory, probe, 512)["compute"]
    return PlanRequest(compute + FIT_MARGIN_BYTES + weights_mib * MIB, n_ctx=256)


def _experts_in_host(inventory: ModelInventory, layers: FitLayers) -> list[int]:
    keys = fit_keys(inventory, layers)
    return [
        b.index
        for b in inventory.blocks
        if (b.index, SubLayerKind.ATTENTION) in keys
        and (b.index, SubLayerKind.ROUTED_EXPERTS) not in keys
    ]


def test_fit_changes_nothing_when_everything_fits() -> None:
    model = _round_model(moe=True)  # 4 x 510 + 50 = 2090 MiB
    assert fit_layers(model, _for_weights(model, 2090)) == (FitLayers(5, 0), "no changes needed")
    assert fit_layers(model, _for_weights(model, 2089))[0] != FitLayers(5, 0)


def test_fit_keeps_dense_only_layers_when_converting_one_more_does_not_fit() -> None:
    # every expert out: 4 x 110 + 50 = 490 <= 1000, a surplus: steps 3 and 4 run.
    # step 3: (5 layers, 4 partial) is block 0 full (fit's mapping) + blocks 1-3 without
    #   experts + output = 510 + 330 + 50 = 890 <= 1000: taken whole.
    # step 4: all full = 2090 > 1000; delta 4, step = 4 * 110 // 1200 = 0 -> 1:
    #   (5, 3) = 2 x 510 + 2 x 110 + 50 = 1290 > 1000: the high bound; delta 1, done.
    model = _round_model(moe=True)
    layers, note = fit_layers(model, _for_weights(model, 1000))
    assert layers == FitLayers(5, 4) and "front to back" in note
    assert _experts_in_host(model, layers) == [1, 2, 3]


def test_fit_converts_dense_only_layers_front_to_back() -> None:
    # step 4 from (5, 4) at 890: step = 4 * 610 // 1200 = 2 -> (5, 2) = 3 x 510 + 110 + 50
    #   = 1690 > 1500, high; delta 2, step = 2 * 610 // 800 = 1 -> (5, 3) = 1290 <= 1500.
    model = _round_model(moe=True)
    layers, _ = fit_layers(model, _for_weights(model, 1500))
    assert layers == FitLayers(5, 3)
    assert _experts_in_host(model, layers) == [2, 3]  # blocks 0 and 1 whole


def test_fit_fills_dense_only_layers_back_to_front_by_false_position() -> None:
    # step 3: (5, 4) = 890 > 600; delta 5, step = 5 * 600 // 890 = 3 -> (3, 2): block 2
    #   full, block 3 without experts, output = 510 + 110 + 50 = 670 > 600, high;
    #   delta 3, step = 3 * 600 // 670 = 2 -> (2, 1): block 3 full + output = 560, low.
    # step 4 (surplus 600 - 490 > 0): all of (2, 1) full is the same 560 MiB: taken.
    model = _round_model(moe=True)
    layers, note = fit_layers(model, _for_weights(model, 600))
    assert layers == FitLayers(2, 0) and "converted all layers" in note
    assert fit_keys(model, layers) == {
        (3, SubLayerKind.ATTENTION),
        (3, SubLayerKind.MOE_ROUTER),
        (3, SubLayerKind.ROUTED_EXPERTS),
        (None, SubLayerKind.OUTPUT_HEAD),
    }


def test_fit_without_a_surplus_for_the_dense_weights_stops_after_step_3() -> None:
    # 480 < 490: no surplus. step 3: (5, 4) = 890 > 480; step = 5 * 480 // 890 = 2 ->
    #   (2, 1) = 560 > 480, high; delta 2, step = 2 * 480 // 560 = 1 -> (1, 0): the
    #   output layer alone, 50 MiB, low; delta 1: n_gpu_layers 1.
    model = _round_model(moe=True)
    layers, note = fit_layers(model, _for_weights(model, 480))
    assert layers == FitLayers(1, 0) and "back to front" in note


def test_fit_fills_whole_dense_layers_back_to_front() -> None:
    # 4 x 400 + 50 = 1650 > 1000; step = 5 * 1000 // 1650 = 3 -> (3, 0) = 50 + 2 x 400 = 850,
    # low; delta 2, step = 2 * 150 // 800 = 0 -> 1 -> (4, 0) = 1250 > 1000: n_gpu_layers 3.
    model = _round_model(moe=False)
    layers, _ = fit_layers(model, _for_weights(model, 1000))
    assert layers == FitLayers(3, 0)
    assert {b for b, _ in fit_keys(model, layers) if b is not None} == {2, 3}


def test_fit_steps_wrap_like_its_unsigned_arithmetic() -> None:
    assert _false_position_step(5, 600, 0, 890) == 3
    assert _false_position_step(4, 1000, 890, 2090) == 1  # 0 is raised to 1
    assert _false_position_step(5, -500, 0, 100) == 4  # -25 as uint32 is huge: delta - 1
    assert _false_position_step(5, -10, 0, 100) == 1  # -0.5 truncates to 0, raised to 1


# --- ours against them ---

BUDGETS = (GIB, 2 * GIB, 3 * GIB, 4 * GIB, 6 * GIB, 8 * GIB)


@pytest.fixture(scope="module")
def grid(models, laptop) -> dict[tuple[str, int], list[tuple[Plan, list[Plan]]]]:
    """Our plan and llama.cpp's at each budget, per model and context (a prompt that fills it).

    Long prompts make our ubatch choices differ in TTFT, so that the 5% of decode
    `_best_of` trades for TTFT would lose to llama.cpp here without the floor.
    """
    return {
        (which, n_ctx): [
            (
                make_plan(models[which], laptop, PlanRequest(b, n_ctx=n_ctx, prompt_tokens=n_ctx)),
                llama_cpp_baselines(
                    models[which], laptop, PlanRequest(b, n_ctx=n_ctx, prompt_tokens=n_ctx)
                ),
            )
            for b in BUDGETS
        ]
        for which in ("moe", "dense")
        for n_ctx in (1024, 16384)
    }


def test_our_plan_never_decodes_slower_than_what_llama_cpp_users_choose(grid) -> None:
    for (which, n_ctx), cells in grid.items():
        for budget, (ours, baselines) in zip(BUDGETS, cells, strict=True):
            assert ours.vram.total_bytes <= budget
            for base in baselines:
                assert ours.predicted_decode_tokens_per_s >= base.predicted_decode_tokens_per_s, (
                    which, n_ctx, budget, base.reason, ours.reason,
                )  # fmt: skip


def test_more_budget_never_predicts_slower_decode_over_a_grid(grid) -> None:
    for key, cells in grid.items():
        decodes = [ours.predicted_decode_tokens_per_s for ours, _ in cells]
        assert all(b >= a * (1 - 1e-9) for a, b in pairwise(decodes)), (key, decodes)
        for i in range(3):  # each llama.cpp family too, so the floor they set rises
            family = [baselines[i].predicted_decode_tokens_per_s for _, baselines in cells
                      if len(baselines) == 3]  # fmt: skip
            assert all(b >= a * (1 - 1e-9) for a, b in pairwise(family)), (key, i, family)


def test_a_winning_llama_cpp_placement_runs_as_planned(grid, models, monkeypatch) -> None:
    winners = [
        (which, ours)
        for (which, _), cells in grid.items()
        for ours, _ in cells
        if "llama.cpp's own placement" in ours.reason
    ]
    assert winners  # dense models at several budgets: whole layers beat ours
    for which, plan in winners:
        _executes_as_planned(plan, models[which], monkeypatch)
