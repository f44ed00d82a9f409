"""engine.planning.split_costing: a model split across two described desktops, each range
under its own plan, the links costed per step (or onto a lent device measured against this
computer); chosen only when it runs faster than one desktop, or when one desktop cannot
hold the model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.errors import BadInputError
from engine.machine.described_machines import load_described
from engine.model.inventory import ModelInventory, read_inventory
from engine.model.synthetic import write_shape_only_model
from engine.model.synthetic_specs import QWEN3_30B_A3B
from engine.planning.machine_split import MachineSplit, RemoteShare
from engine.planning.split_costing import (
    RPC_STEP_S,
    Computer,
    MeasuredDevice,
    cost_split,
    predict_split,
)
from engine.remote.link_measure import LinkFigures
from engine.remote.remote_speed import RemoteSpeed

GIB = 2**30


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> ModelInventory:
    folder = tmp_path_factory.mktemp("split-costing")
    return read_inventory(write_shape_only_model(folder / "moe.gguf", QWEN3_30B_A3B, "Q4_0"))


def desktops(ram_gib: float | None = None) -> list[Computer]:
    profile = load_described("desktop-16gb")
    if ram_gib is not None:  # a desktop with less memory free
        memory = {**profile.hardware["memory"], "available_bytes": int(ram_gib * GIB)}
        profile = replace(profile, hardware={**profile.hardware, "memory": memory})
    return [Computer(f"desktop-{n}", profile, 15 * GIB) for n in (1, 2)]


def here_and_lent(computers: list[Computer]) -> tuple[Computer, list[Computer]]:
    return computers[0], computers[1:]


def link(gbit: float, round_trip_ms: float) -> LinkFigures:
    rate = gbit * 1e9 / 8
    return LinkFigures(round_trip_ms / 1000, rate, rate)


def test_a_faster_link_is_never_predicted_slower(moe) -> None:
    speeds = [
        predict_split(moe, 4096, *here_and_lent(desktops()), [link(gbit, ms)]).decode_tokens_per_s
        for gbit, ms in ((0.1, 1.0), (1, 0.25), (10, 0.1), (100, 0.01))
    ]
    assert speeds == sorted(speeds) and speeds[0] < speeds[-1]


def test_a_slow_link_is_not_chosen_where_this_desktop_holds_the_model(moe) -> None:
    slow = predict_split(moe, 4096, *here_and_lent(desktops()), [link(0.1, 2.0)])
    assert slow.alone_tokens_per_s is not None and not slow.chosen
    assert slow.decode_tokens_per_s < slow.alone_tokens_per_s
    assert slow.link_s > 0 and slow.load_transfer_s > 0


def test_a_model_this_desktop_cannot_hold_is_split_and_chosen(moe) -> None:
    small = desktops(ram_gib=1)  # 1 GiB free and a 15 GiB budget: not the 17 GiB model
    cell = predict_split(moe, 4096, *here_and_lent(small), [link(1, 0.25)])
    assert cell.alone_tokens_per_s is None and cell.chosen and cell.split.uses_remotes
    assert "does not fit this computer alone" in cell.describe()
    assert len(cell.compute_s) == 2 and all(seconds > 0 for seconds in cell.compute_s)


def test_a_model_neither_can_hold_is_refused(moe) -> None:
    tiny = [replace(computer, vram_budget_bytes=2 * GIB) for computer in desktops(ram_gib=1)]
    with pytest.raises(BadInputError, match="needs .* GiB"):
        predict_split(moe, 4096, *here_and_lent(tiny), [link(1, 0.25)])


def test_the_link_cost_is_what_crosses_each_hop(moe) -> None:
    here, lent = here_and_lent(desktops(ram_gib=1))
    split = predict_split(moe, 4096, here, lent, [link(1, 0.25)]).split
    rate = 1e9 / 8
    remote_head = cost_split(
        moe, 4096, here, lent, [link(1, 0.25)], replace(split, output_here=False)
    )
    # the activations go out and the logits come back, each after a round trip
    expected = 2 * 0.25e-3 + RPC_STEP_S + (2048 * 4) / rate + (151936 * 4) / rate
    assert remote_head.link_s == pytest.approx(expected)
    head_here = cost_split(moe, 4096, here, lent, [link(1, 0.25)], replace(split, output_here=True))
    # the output layer kept here: the activations come back instead of the logits
    assert head_here.link_s == pytest.approx(2 * 0.25e-3 + RPC_STEP_S + 2 * (2048 * 4) / rate)


def test_over_a_slow_link_the_output_layer_stays_here(moe) -> None:
    here, lent = here_and_lent(desktops(ram_gib=1))
    slow = predict_split(moe, 4096, here, lent, [link(0.1, 1.0)])
    assert slow.split.output_here and "(the output layer here)" in slow.describe()
    fast = predict_split(moe, 4096, here, lent, [link(100, 0.01)])
    assert fast.decode_tokens_per_s > slow.decode_tokens_per_s


# -- a lent device measured through its RPC server ----------------------------------------


def measured(times_faster: float, overhead_ms: float) -> RemoteSpeed:
    """A lent device's figures as engine.remote.remote_speed records them."""
    return RemoteSpeed(
        block_s=0.001 / times_faster,
        local_block_s=0.001,
        block_bytes=13 * 2**20,
        step_overhead_s=overhead_ms / 1000,
        n_embd=1024,
        n_vocab=256,
    )


def test_a_measured_device_runs_its_range_at_its_speed_against_this_computer(moe) -> None:
    here = Computer("here", load_described("desktop-16gb"), 0, room_bytes=6 * GIB)
    fast_link = link(10, 0.1)
    split = MachineSplit(moe.n_layer, 20, (RemoteShare("lent", moe.n_layer - 20),))
    cells = {
        times: cost_split(
            moe, 4096, here, [MeasuredDevice("lent", 20 * GIB, measured(times, 0.5))],
            [fast_link], split,
        )
        for times in (1.0, 4.0)
    }  # fmt: skip
    slow, fast = cells[1.0], cells[4.0]
    assert fast.compute_s[0] == pytest.approx(slow.compute_s[0])
    assert fast.compute_s[1] == pytest.approx(slow.compute_s[1] / 4)
    # the hop is the measured overhead, and what this model's activations and logits add
    # over the micro-model's at the link's rate
    rate = 10e9 / 8
    expected = 0.5e-3 + (2048 - 1024) * 4 / rate + (151936 - 256) * 4 / rate
    assert fast.link_s == pytest.approx(expected)


def test_a_measured_device_that_is_slow_is_not_chosen_where_this_computer_suffices(moe) -> None:
    here = Computer("here", load_described("desktop-16gb"), 15 * GIB, room_bytes=40 * GIB)
    slow = [MeasuredDevice("lent", 20 * GIB, measured(0.25, 3.0))]
    cell = predict_split(moe, 4096, here, slow, [link(1, 0.25)])
    assert cell.alone_tokens_per_s is not None and not cell.chosen
