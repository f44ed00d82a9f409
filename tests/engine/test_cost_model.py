"""The roofline cost model on a profile recorded on a real 2-core machine (tests/data)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from engine.machine.profile import Device, KernelShape, Profile
from engine.model.inventory import SubLayerKind, read_inventory
from engine.planning.cost_model import ALL_CPU, CostModel, Placement, Where, overlapped_seconds


@pytest.fixture(scope="module")
def profile(recorded_profile: Profile) -> Profile:
    return recorded_profile


@pytest.fixture(scope="module")
def model(profile: Profile) -> CostModel:
    return CostModel(profile)


@pytest.fixture(scope="module")
def default_inventory(default_model_file: Path):
    return read_inventory(default_model_file)


def test_measured_points_are_reproduced_exactly(model: CostModel, profile: Profile) -> None:
    for point in profile.cpu_kernels:
        fixed = profile.cpu_layer_overhead_s[point.threads]
        expected = point.flops_per_layer / (point.seconds_per_layer - fixed) / 1e9
        got = model.kernel_gflops(
            point.device, point.shape, point.quant, point.threads, point.n_tokens
        )
        assert got == pytest.approx(expected)


def test_throughput_between_measured_token_counts_lies_between_them(model: CostModel) -> None:
    at = {n: model.kernel_gflops(Device.CPU, KernelShape.DENSE, "Q4_0", 2, n) for n in (4, 8, 16)}
    assert min(at[4], at[16]) <= at[8] <= max(at[4], at[16])
    beyond = model.kernel_gflops(Device.CPU, KernelShape.DENSE, "Q4_0", 2, 4096)
    assert beyond == model.kernel_gflops(Device.CPU, KernelShape.DENSE, "Q4_0", 2, 256)


def test_unmeasured_quants_and_thread_counts_use_the_nearest_measured(model: CostModel) -> None:
    q6k = model.kernel_gflops(Device.CPU, KernelShape.DENSE, "Q6_K", 2, 16)
    assert q6k == model.kernel_gflops(Device.CPU, KernelShape.DENSE, "Q4_K", 2, 16)
    q5_1 = model.kernel_gflops(Device.CPU, KernelShape.DENSE, "Q5_1", 2, 16)
    assert q5_1 == model.kernel_gflops(Device.CPU, KernelShape.DENSE, "Q4_1", 2, 16)
    eight = model.kernel_gflops(Device.CPU, KernelShape.DENSE, "Q4_0", 8, 16)
    assert eight == model.kernel_gflops(Device.CPU, KernelShape.DENSE, "Q4_0", 2, 16)
    moe_q8 = model.kernel_gflops(Device.CPU, KernelShape.MOE, "Q8_0", 2, 16)
    assert moe_q8 == model.kernel_gflops(Device.CPU, KernelShape.MOE, "Q4_0", 2, 16)


def test_a_step_is_the_sum_of_its_parts(model: CostModel, default_inventory) -> None:
    step = model.predict_step(default_inventory, 16, 2, n_outputs=16, n_past=256)
    assert step.seconds == pytest.approx(sum(step.by_kind.values()) + step.overhead_s)
    assert set(step.by_kind) == {
        SubLayerKind.ATTENTION,
        SubLayerKind.DENSE_FFN,
        SubLayerKind.OUTPUT_HEAD,
    }
    assert step.by_device.keys() == {Where.CPU} and step.transfer_s == 0


def test_predictions_grow_with_work(model: CostModel, default_inventory) -> None:
    def seconds(**kw) -> float:
        return model.predict_step(default_inventory, **kw).seconds

    assert seconds(n_tokens=16, threads=2) > seconds(n_tokens=1, threads=2)
    assert seconds(n_tokens=1, threads=2, n_past=2048) > seconds(n_tokens=1, threads=2, n_past=0)
    assert seconds(n_tokens=16, threads=2, n_outputs=16) > seconds(n_tokens=16, threads=2)
    assert seconds(n_tokens=256, threads=1) > seconds(n_tokens=256, threads=2)


def test_sliding_window_caps_the_attention_cost(model: CostModel, make_synthetic) -> None:
    gemma = read_inventory(make_synthetic("gemma3", "F16", n_layer=6, sliding_window=128))
    block_swa, block_global = gemma.blocks[0], gemma.blocks[5]
    far = model.attention_seconds(gemma, block_swa, 1, 4000, Device.CPU)
    near = model.attention_seconds(gemma, block_swa, 1, 64, Device.CPU)
    assert far == pytest.approx(2 * near)  # the window (128) caps the context
    assert model.attention_seconds(gemma, block_global, 1, 4000, Device.CPU) > 30 * far


def test_moe_decode_touches_only_the_active_experts(model: CostModel, make_synthetic) -> None:
    moe = read_inventory(make_synthetic("qwen3moe", "F16", n_expert=8, n_expert_used=2))
    experts = moe.blocks[0].sublayer(SubLayerKind.ROUTED_EXPERTS)
    one = model.sublayer_cost(experts, Where.CPU, 2, 1, expert_share=0.25)
    many = model.sublayer_cost(experts, Where.CPU, 2, 256, expert_share=0.25)
    bandwidth = model.profile.dram_read_gbps * 1e9
    assert one.memory_s == pytest.approx(experts.n_bytes * 0.25 / bandwidth)
    assert many.memory_s == pytest.approx(experts.n_bytes * (1 - 0.75**256) / bandwidth)


def test_last_block_feed_forward_runs_only_for_output_rows(
    model: CostModel, default_inventory
) -> None:
    prompt = model.predict_step(default_inventory, 256, 2, n_outputs=1)
    all_rows = model.predict_step(default_inventory, 256, 2, n_outputs=256)
    ffn_per_block = all_rows.by_kind[SubLayerKind.DENSE_FFN] / default_inventory.n_layer
    saved = all_rows.by_kind[SubLayerKind.DENSE_FFN] - prompt.by_kind[SubLayerKind.DENSE_FFN]
    assert 0.5 * ffn_per_block < saved < 1.01 * ffn_per_block


def test_placing_on_a_gpu_needs_a_gpu_in_the_profile(model: CostModel, default_inventory) -> None:
    with pytest.raises(ValueError, match="no GPU"):
        model.predict_step(default_inventory, 1, 2, placement=Placement(default=Where.GPU))
    assert ALL_CPU.default is Where.CPU


def test_a_profile_without_kernels_is_refused(profile: Profile) -> None:
    with pytest.raises(ValueError, match="no kernel"):
        CostModel(replace(profile, cpu_kernels=()))


def test_predictions_survive_a_json_round_trip(profile: Profile, default_inventory) -> None:
    again = CostModel(Profile.from_json(profile.to_json()))
    a = CostModel(profile).predict_step(default_inventory, 16, 2, 16, 256).seconds
    b = again.predict_step(default_inventory, 16, 2, 16, 256).seconds
    assert math.isclose(a, b)


# --- a GPU profile: measured on Mesa's lavapipe (software Vulkan) by `make test-gpu`'s venv ---

LAVAPIPE = Path(__file__).resolve().parents[1] / "data" / "profile-lavapipe-fast.json"


@pytest.fixture(scope="module")
def lavapipe() -> Profile:
    return Profile.from_json(LAVAPIPE.read_text())


def test_gpu_points_are_reproduced_net_of_the_per_block_launch_cost(lavapipe: Profile) -> None:
    model, gpu = CostModel(lavapipe), lavapipe.gpu
    assert gpu is not None and gpu.backend == "Vulkan" and gpu.layer_overhead_s > 0
    for point in gpu.kernels:
        net = max(point.seconds_per_layer - gpu.layer_overhead_s, point.seconds_per_layer / 2)
        got = model.kernel_gflops(point.device, point.shape, point.quant, 1, point.n_tokens)
        assert got == pytest.approx(point.flops_per_layer / net / 1e9)


def test_each_block_on_the_gpu_pays_its_launch_cost(lavapipe: Profile, default_inventory) -> None:
    on_gpu = Placement(Where.GPU, {(None, SubLayerKind.TOKEN_EMBEDDING): Where.CPU})
    with_launches = CostModel(lavapipe).predict_step(default_inventory, 1, 1, placement=on_gpu)
    assert lavapipe.gpu is not None
    free = replace(lavapipe, gpu=replace(lavapipe.gpu, layer_overhead_s=0.0))
    without = CostModel(free).predict_step(default_inventory, 1, 1, placement=on_gpu)
    launches = lavapipe.gpu.layer_overhead_s * len(default_inventory.blocks)
    assert with_launches.overhead_s - without.overhead_s == pytest.approx(launches)


def test_uploads_ahead_hide_the_shorter_of_each_sublayers_upload_and_compute(
    lavapipe: Profile, default_inventory
) -> None:
    """With staging slots a streamed sub-layer costs the longer of its upload and its compute,
    plus the step's first upload, which nothing computes beside."""
    model = CostModel(lavapipe)
    resident = {(0, SubLayerKind.ATTENTION): Where.GPU}
    serial = Placement(Where.STREAMED, resident)
    ahead = replace(serial, prefetch_slots=3)
    rows = 256
    before = model.predict_step(default_inventory, rows, 1, placement=serial)
    after = model.predict_step(default_inventory, rows, 1, placement=ahead)
    streamed = [
        s
        for s in default_inventory.all_sublayers()
        if s.block is not None and (s.block, s.kind) not in resident
    ]
    hidden = 0.0
    for sub in streamed:
        rows_of = (
            1
            if sub.block == default_inventory.blocks[-1].index
            and sub.kind is SubLayerKind.DENSE_FFN
            else rows
        )
        cost = model.sublayer_cost(sub, Where.STREAMED, 1, rows_of)
        hidden += min(max(cost.compute_s, cost.memory_s), cost.transfer_s)
    heads = [s for s in default_inventory.globals if s.kind is SubLayerKind.OUTPUT_HEAD]
    heads = heads or [  # tied: the head multiplies by the token embedding
        s for s in default_inventory.globals if s.kind is SubLayerKind.TOKEN_EMBEDDING
    ]
    head = model.sublayer_cost(heads[0], Where.STREAMED, 1, 1)  # the last row's logits
    hidden += min(max(head.compute_s, head.memory_s), head.transfer_s)
    first = model.stream_seconds(streamed[0].slot_bytes)
    assert after.seconds == pytest.approx(before.seconds - hidden + first)
    assert after.transfer_s == before.transfer_s  # the same bytes cross PCIe
    # a decode step streams nothing: staging slots change nothing there
    static = Placement(Where.CPU, resident, prefetch_slots=3)
    assert model.predict_step(default_inventory, 1, 1, placement=static).seconds == (
        model.predict_step(
            default_inventory, 1, 1, placement=replace(static, prefetch_slots=0)
        ).seconds
    )


def test_an_expert_banks_first_matrix_waits_for_its_router() -> None:
    """Experts upload once the router chose them: of gate, up and down, the gate bank's
    upload is never hidden, the other two overlap the compute before them."""
    busy, upload = 3.0, 6.0
    assert overlapped_seconds(SubLayerKind.DENSE_FFN, busy, upload) == upload
    experts = overlapped_seconds(SubLayerKind.ROUTED_EXPERTS, busy, upload)
    # gate's upload, then the longer of each next upload and the compute before it, then down
    assert experts == pytest.approx(upload / 3 + 2 * max(busy / 3, upload / 3) + busy / 3)
    assert max(busy, upload) < experts < busy + upload
