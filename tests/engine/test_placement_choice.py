"""Placement by hand (issue 13): parsing, llama.cpp's resident sets, refusals, which GPU."""

from __future__ import annotations

import re
from dataclasses import replace

import llama_cpp
import pytest

import engine.llama.buffer_overrides as buffer_overrides
import engine.planning.execution as plan_execution
from engine.errors import BadInputError
from engine.llama.buffer_overrides import BufferType
from engine.llama.load_params import LoadParams, make_llama_kwargs
from engine.machine.described_machines import load_described
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, SubLayerKind, read_inventory
from engine.model.synthetic import write_shape_only_model
from engine.model.synthetic_specs import LLAMA_3_8B_CTX_2K, QWEN3_30B_A3B
from engine.planning.llama_costing import layer_keys, vram_account_of
from engine.planning.llama_placements import layer_offload_baseline
from engine.planning.placement_choice import (
    AUTO,
    CPU_ONLY,
    NO_GPU,
    PlacementChoice,
    PlacementDoesNotFit,
    PlacementKind,
    load_params_for_plan,
    plan_for_choice,
    replan,
    select_gpu,
)
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan

GIB = 1 << 30
# llama.cpp's --n-cpu-moe pattern (common/common.h LLM_FFN_EXPS_REGEX), per block
EXPERT_TENSOR = re.compile(r"^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_(ch|)exps")
BLOCK_TENSOR = re.compile(r"^blk\.(\d+)\.")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, ModelInventory]:
    folder = tmp_path_factory.mktemp("shape-only")
    return {
        "moe": read_inventory(write_shape_only_model(folder / "moe.gguf", QWEN3_30B_A3B, "Q4_0")),
        "dense": read_inventory(
            write_shape_only_model(folder / "dense.gguf", LLAMA_3_8B_CTX_2K, "Q4_0")
        ),
    }


@pytest.fixture(scope="module")
def laptop() -> Profile:
    return load_described("laptop-8gb")


def _names(inventory: ModelInventory) -> set[str]:
    return {n for s in inventory.all_sublayers() for n in s.tensor_names}


def _on_gpu_in_llama_cpp(params: LoadParams, inventory: ModelInventory) -> set[str]:
    """The tensors llama.cpp puts in VRAM under `params`, from tensor names alone.

    n_gpu_layers=N offloads blocks n_layer + 1 - N .. n_layer - 1 and the output layer
    (output.weight, output_norm.weight); token_embd stays on the CPU; the first
    override whose pattern regex_searches a name decides instead.
    """
    n = len(inventory.blocks)
    start = n + 1 - params.n_gpu_layers
    on_gpu = set()
    for name in _names(inventory):
        match = next((b for p, b in params.tensor_overrides if re.search(p, name)), None)
        if match is not None:
            gpu = match != "CPU"
        elif block := BLOCK_TENSOR.match(name):
            gpu = int(block.group(1)) >= start
        else:
            gpu = name != "token_embd.weight" and n >= start
        if gpu:
            on_gpu.add(name)
    return on_gpu


def _params(plan, inventory, monkeypatch) -> LoadParams:
    monkeypatch.setattr(plan_execution, "_gpu_buffer_type", lambda: "CUDA0")
    return load_params_for_plan(plan, inventory, inventory.path)


# --- parsing ---


@pytest.mark.parametrize(
    ("text", "kind", "count"),
    [("auto", PlacementKind.AUTO, 0), ("cpu", PlacementKind.CPU, 0),
     ("layers:8", PlacementKind.LAYERS, 8), (" Layers:0 ", PlacementKind.LAYERS, 0),
     ("cpu-moe:12", PlacementKind.CPU_MOE, 12), ("layers:999", PlacementKind.LAYERS, 999)],
)  # fmt: skip
def test_placements_parse_and_print_back(text: str, kind: PlacementKind, count: int) -> None:
    choice = PlacementChoice.parse(text)
    assert (choice.kind, choice.count) == (kind, count)
    assert PlacementChoice.parse(str(choice)) == choice
    assert choice.is_manual == (kind is not PlacementKind.AUTO)


@pytest.mark.parametrize(
    "text",
    ["", "gpu", "layers", "layers:", "layers:-1", "layers:x", "layers:1.5", "cpu-moe",
     "cpu:2", "auto:1", "layers=8", "cpumoe:3"],
)  # fmt: skip
def test_bad_placements_are_bad_input_in_one_line(text: str) -> None:
    with pytest.raises(BadInputError) as raised:
        PlacementChoice.parse(text)
    message = str(raised.value)
    assert "\n" not in message and "placement" in message


# --- the resident sets llama.cpp would have ---


@pytest.mark.parametrize("layers", [1, 8, 20])
def test_layers_n_is_llama_cpps_n_gpu_layers(models, laptop, monkeypatch, layers: int) -> None:
    inventory = models["dense"]
    plan = plan_for_choice(inventory, laptop, PlanRequest(8 * GIB, n_ctx=2048),
                           PlacementChoice(PlacementKind.LAYERS, layers))  # fmt: skip
    first = 32 + 1 - layers  # llama.cpp's i_gpu_start: the output layer is one of the N
    expected = {
        n for n in _names(inventory)
        if ((m := BLOCK_TENSOR.match(n)) and int(m.group(1)) >= first)
        or n in ("output.weight", "output_norm.weight")
    }  # fmt: skip
    assert set(plan.resident_tensor_names) == expected
    params = _params(plan, inventory, monkeypatch)
    # -ngl 1 (the output layer alone) loads as n_gpu_layers 0 plus overrides: the same tensors
    assert params.n_gpu_layers == (layers if layers > 1 else 0)
    assert _on_gpu_in_llama_cpp(params, inventory) == expected
    blocks_kv = {b for b, kind in plan.resident if kind is SubLayerKind.ATTENTION}
    assert plan.vram.kv_cache_bytes == sum(
        inventory.blocks[b].kv_cache_bytes(2048) for b in blocks_kv
    )


@pytest.mark.parametrize("n_cpu", [30, 41, 48])
def test_cpu_moe_n_keeps_the_experts_of_the_first_n_blocks_in_host_memory(
    models, laptop, monkeypatch, n_cpu: int
) -> None:
    inventory = models["moe"]
    plan = plan_for_choice(inventory, laptop, PlanRequest(int(7.9 * GIB), n_ctx=1024),
                           PlacementChoice(PlacementKind.CPU_MOE, n_cpu))  # fmt: skip
    in_host = {
        n for n in _names(inventory) if (m := EXPERT_TENSOR.match(n)) and int(m.group(1)) < n_cpu
    }
    assert len(in_host) == 3 * n_cpu
    expected = _names(inventory) - in_host - {"token_embd.weight"}
    assert set(plan.resident_tensor_names) == expected
    params = _params(plan, inventory, monkeypatch)
    assert params.n_gpu_layers == 48 + 1  # every layer, as -ngl 999 gives
    assert _on_gpu_in_llama_cpp(params, inventory) == expected


def test_more_layers_than_the_model_has_means_all_of_them(models, laptop) -> None:
    inventory = models["dense"]
    request = PlanRequest(8 * GIB, n_ctx=1024)
    every = plan_for_choice(inventory, laptop, request, PlacementChoice.parse("layers:33"))
    clamped = plan_for_choice(inventory, laptop, request, PlacementChoice.parse("layers:999"))
    assert clamped.resident == every.resident
    assert len(every.resident_tensor_names) == len(_names(inventory)) - 1  # not token_embd


# --- refusals ---


def test_a_manual_placement_over_the_budget_is_refused_with_what_it_needs(models, laptop) -> None:
    inventory = models["dense"]
    request = PlanRequest(4 * GIB, n_ctx=4096)
    with pytest.raises(PlacementDoesNotFit) as raised:
        plan_for_choice(inventory, laptop, request, PlacementChoice.parse("layers:30"))
    message = str(raised.value)
    need = vram_account_of(inventory, request, layer_keys(inventory, 30), 128 << 20)
    assert need.total_bytes > request.vram_budget_bytes
    assert f"needs {need.total_bytes / GIB:.2f} GiB" in message and "4.00 GiB budget" in message
    assert "\n" not in message
    assert isinstance(raised.value, ValueError)  # callers that map ValueError see it too


def test_cpu_moe_on_a_dense_model_and_layers_without_a_gpu_are_refused(models, laptop) -> None:
    request = PlanRequest(4 * GIB)
    with pytest.raises(BadInputError, match="not a mixture-of-experts"):
        plan_for_choice(models["dense"], laptop, request, PlacementChoice.parse("cpu-moe:4"))
    no_gpu = replace(laptop, gpu=None)
    with pytest.raises(BadInputError, match="needs a GPU"):
        plan_for_choice(models["dense"], no_gpu, request, PlacementChoice.parse("layers:4"))
    with pytest.raises(ValueError, match="exceeds the GPU's memory"):
        plan_for_choice(
            models["dense"], laptop, PlanRequest(9 * GIB), PlacementChoice.parse("layers:1")
        )


# --- the same cost model on both sides ---


def test_auto_is_the_planners_plan_and_never_loses_to_the_best_whole_layer_choice(
    models, laptop
) -> None:
    inventory = models["dense"]
    request = PlanRequest(4 * GIB, n_ctx=4096)
    auto = plan_for_choice(inventory, laptop, request, AUTO)
    assert auto.resident == make_plan(inventory, laptop, request).resident
    assert auto.extras["placement"] == "auto" and auto.extras["main_gpu"] == 0
    baseline = layer_offload_baseline(inventory, laptop, request)
    best_n = int(re.match(r"n_gpu_layers=(\d+) ", baseline.reason).group(1))
    manual = plan_for_choice(inventory, laptop, request, PlacementChoice.parse(f"layers:{best_n}"))
    assert manual.resident == baseline.resident
    assert manual.vram == baseline.vram  # one VRAM account
    assert auto.predicted_decode_tokens_per_s >= manual.predicted_decode_tokens_per_s
    fewer = plan_for_choice(inventory, laptop, request, PlacementChoice(PlacementKind.LAYERS, 4))
    assert fewer.predicted_decode_tokens_per_s < manual.predicted_decode_tokens_per_s


def test_cpu_only_puts_nothing_on_any_gpu(models, laptop, monkeypatch) -> None:
    inventory = models["dense"]
    plan = plan_for_choice(inventory, laptop, PlanRequest(6 * GIB), CPU_ONLY)
    assert plan.resident == () and plan.vram.total_bytes == 0
    assert all(t.chosen.family.value == "cpu_only" for t in plan.tiers)
    params = _params(plan, inventory, monkeypatch)
    assert params.n_gpu_layers == 0 and not params.op_offload and params.main_gpu == NO_GPU
    kwargs = make_llama_kwargs(params)
    assert kwargs["main_gpu"] == -1 and kwargs["split_mode"] == llama_cpp.LLAMA_SPLIT_MODE_NONE


def test_the_default_gpu_loads_as_before(models, laptop, monkeypatch) -> None:
    inventory = models["dense"]
    plan = plan_for_choice(inventory, laptop, PlanRequest(4 * GIB), AUTO)
    kwargs = make_llama_kwargs(_params(plan, inventory, monkeypatch))
    assert kwargs["main_gpu"] == 0 and "split_mode" not in kwargs  # llama-cpp-python's default


# --- a new budget ---


def test_a_manual_placement_survives_a_budget_change_and_falls_back_when_it_no_longer_fits(
    models, laptop
) -> None:
    inventory = models["dense"]
    layers = PlacementChoice.parse("layers:20")
    first = plan_for_choice(inventory, laptop, PlanRequest(6 * GIB, n_ctx=2048), layers)
    kept, notice = replan(inventory, laptop, PlanRequest(7 * GIB, n_ctx=2048), first)
    assert notice is None and kept.resident == first.resident
    assert kept.extras["placement"] == "layers:20"
    smaller, notice = replan(inventory, laptop, PlanRequest(2 * GIB, n_ctx=2048), kept)
    assert notice is not None and "layers:20 needs" in notice
    assert smaller.extras["placement"] == "auto"
    assert smaller.extras["requested_placement"] == "layers:20"
    assert smaller.vram.total_bytes <= 2 * GIB
    back, notice = replan(inventory, laptop, PlanRequest(6 * GIB, n_ctx=2048), smaller)
    assert notice is None and back.resident == first.resident


# --- which GPU ---


def _two_gpus(laptop: Profile, second: dict) -> Profile:
    first = laptop.hardware["gpus"][0]
    hardware = {**laptop.hardware, "gpus": [first, {**first, "index": 1, **second}]}
    return replace(laptop, hardware=hardware)


def test_a_one_gpu_profile_takes_only_gpu_0(laptop) -> None:
    assert select_gpu(laptop, 0).profile is laptop
    assert select_gpu(laptop, None).index == 0
    for index in (1, -1):
        with pytest.raises(BadInputError, match="only GPU 0 is valid"):
            select_gpu(laptop, index)
    with pytest.raises(BadInputError, match="no usable GPU"):
        select_gpu(replace(laptop, gpu=None, hardware={}), 0)


def test_a_second_gpu_is_planned_with_its_own_memory(models, laptop) -> None:
    profile = _two_gpus(laptop, {"name": "Big GPU", "vram_total_bytes": 24 * GIB,
                                 "ggml_device": "CUDA1"})  # fmt: skip
    selection = select_gpu(profile, 1)
    assert selection.profile.gpu.vram_total_bytes == 24 * GIB
    assert selection.profile.gpu.ggml_device == "CUDA1"
    assert "GPU 1 (Big GPU) was not profiled" in selection.note
    plan = plan_for_choice(models["dense"], selection.profile, PlanRequest(12 * GIB), AUTO, 1)
    assert plan.extras["main_gpu"] == 1 and plan.extras["ggml_device"] == "CUDA1"
    with pytest.raises(ValueError, match="exceeds"):  # the first GPU's 8 GiB
        plan_for_choice(models["dense"], select_gpu(profile, 0).profile, PlanRequest(12 * GIB))


def test_an_integrated_gpu_beside_a_discrete_one_is_refused(laptop) -> None:
    profile = _two_gpus(laptop, {"name": "Radeon 780M", "integrated": True})
    with pytest.raises(BadInputError, match="integrated"):
        select_gpu(profile, 1)


def test_another_gpus_load_puts_resident_weights_in_its_own_buffers(
    models, laptop, monkeypatch
) -> None:
    inventory = models["dense"]
    profile = _two_gpus(laptop, {"name": "Big GPU", "ggml_device": "CUDA1"})
    selection = select_gpu(profile, 1)
    output_only = PlacementChoice.parse("layers:1")  # placed by an override to the GPU
    plan = plan_for_choice(inventory, selection.profile, PlanRequest(3 * GIB), output_only, 1)
    monkeypatch.setattr(buffer_overrides, "buffer_types", lambda: {
        "CPU": BufferType("CPU", "CPU", True), "CUDA0": BufferType("CUDA0", "CUDA0", False),
        "CUDA1": BufferType("CUDA1", "CUDA1", False),
        "CUDA_Host": BufferType("CUDA_Host", "CUDA0", True),
    })  # fmt: skip
    params = _params(plan, inventory, monkeypatch)
    assert params.main_gpu == 1
    targets = {buft for _pattern, buft in params.tensor_overrides}
    assert targets and targets <= {"CPU", "CUDA1"} and "CUDA1" in targets
    assert make_llama_kwargs(params)["split_mode"] == llama_cpp.LLAMA_SPLIT_MODE_NONE
