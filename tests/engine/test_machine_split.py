"""A model split across this machine and two lent computers (two real RPC servers of this
build on loopback, with their CPU devices): llama.cpp places each range where the split
says, the greedy reply is the local one, and a server that dies mid-reply ends the
process that used it, not ours."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from engine.child_process import run_in_child
from engine.errors import BadInputError
from engine.llama.device_buffers import DeviceBuffers
from engine.model.inventory import read_inventory
from engine.planning.machine_split import (
    MachineSplit,
    RemoteShare,
    describe_held,
    held_shares,
    output_bytes,
    split_across,
)
from engine.remote.rpc_probe import RemoteUnreachable, probe
from engine.remote.sharing import SharingServer
from tests.engine.split_runs import greedy_reply
from tests.lent_computers import endpoint

MIB = 2**20


@pytest.fixture
def two_lent(lend) -> list[SharingServer]:
    return [lend(), lend()]


def test_blocks_fill_this_machine_then_each_lent_device_in_order(default_model_file) -> None:
    inventory = read_inventory(default_model_file)
    block = inventory.blocks[0].n_bytes + inventory.blocks[0].kv_cache_bytes(512)
    globals_ = sum(sublayer.n_bytes for sublayer in inventory.globals)
    split = split_across(
        inventory, 512, globals_ + 10 * block, [("a:1", 12 * block), ("b:2", 100 * block)]
    )
    rest = inventory.n_layer - 22  # the last also holds the output layer, in its 100 blocks' room
    assert split == MachineSplit(
        inventory.n_layer, 10, (RemoteShare("a:1", 12), RemoteShare("b:2", rest))
    )
    assert split.describe() == (
        f"blocks 0-9 here, 10-21 on a:1, 22-{inventory.n_layer - 1} on b:2 (and the output layer)"
    )
    with pytest.raises(BadInputError, match="needs .* GiB .* give it"):
        split_across(inventory, 512, globals_ + block, [("a:1", block)])


def test_a_split_model_runs_where_planned_and_says_what_this_machine_alone_says(
    default_model_file, two_lent
) -> None:
    inventory = read_inventory(default_model_file)
    third = inventory.n_layer // 3
    split = MachineSplit(
        inventory.n_layer,
        third,
        (RemoteShare(endpoint(two_lent[0]), third), RemoteShare(endpoint(two_lent[1]), third)),
    )
    model = str(default_model_file)
    alone = run_in_child(greedy_reply, (model, None), timeout_s=300, label="split-alone")
    across = run_in_child(greedy_reply, (model, split), timeout_s=300, label="split-across")
    assert alone.ok and across.ok, (alone.failure, across.failure)
    text, generated, _buffers = alone.value
    split_text, _generated, buffers = across.value
    assert generated >= 32 and split_text == text  # lossless: the same greedy tokens
    blocks = sum(block.n_bytes for block in inventory.blocks[:third])
    planned = [blocks, blocks + output_bytes(inventory)]  # the output layer is the last's
    for share, weights in zip(split.shares, planned, strict=True):  # each holds its third
        (name,) = [name for name in buffers if name.endswith(f"[{share.endpoint}]")]
        assert abs(buffers[name]["model"] - weights) < 0.02 * weights + MIB, (name, buffers)
        assert buffers[name]["kv"] > 0  # its blocks' KV cache lives there too
    # the output layer kept here (overrides to CPU memory): the same tokens, and the last
    # lent computer holds its blocks alone
    head_here = replace(split, output_here=True)
    kept = run_in_child(greedy_reply, (model, head_here), timeout_s=300, label="split-head-here")
    assert kept.ok, kept.failure
    kept_text, _generated, kept_buffers = kept.value
    assert kept_text == text
    held = held_shares(head_here, inventory, DeviceBuffers(kept_buffers))
    assert [share.planned_bytes for share in held] == [blocks, blocks]
    assert all(share.as_planned for share in held), held


def test_a_lent_device_holding_other_than_planned_is_said(default_model_file) -> None:
    inventory = read_inventory(default_model_file)
    split = MachineSplit(inventory.n_layer, 10, (RemoteShare("127.0.0.1:5", 20),))
    planned = sum(block.n_bytes for block in inventory.blocks[10:]) + output_bytes(inventory)
    right = DeviceBuffers({"RPC0[127.0.0.1:5]": {"model": planned, "kv": MIB}, "CPU": {}})
    (held,) = held_shares(split, inventory, right)
    assert held.as_planned and held.planned_bytes == planned
    assert describe_held([held]).startswith("weights on the lent computers as planned: ")
    half = DeviceBuffers({"RPC0[127.0.0.1:5]": {"model": planned // 2}})
    (short,) = held_shares(split, inventory, half)
    assert not short.as_planned and "NOT as planned" in describe_held([short])


def test_a_lent_computer_that_dies_mid_reply_ends_the_process_that_used_it(
    default_model_file, two_lent, tmp_path: Path
) -> None:
    inventory = read_inventory(default_model_file)
    half = inventory.n_layer // 2
    split = MachineSplit(inventory.n_layer, half, (RemoteShare(endpoint(two_lent[0]), half),))
    replying = tmp_path / "replying"

    def kill_the_server_mid_reply() -> None:
        deadline = time.monotonic() + 120
        while not replying.exists() and time.monotonic() < deadline:
            time.sleep(0.01)  # the child makes it at its first piece: a file to poll
        (rpc,) = [
            p
            for p in psutil.Process().children()
            if p.name() == "ggml-rpc-server"
            and str(two_lent[0].settings.port) in " ".join(p.cmdline())
        ]
        rpc.kill()

    killer = threading.Thread(target=kill_the_server_mid_reply)
    killer.start()
    outcome = run_in_child(
        greedy_reply, (str(default_model_file), split, str(replying), 400), 300, label="split-dies"
    )
    killer.join()
    assert not outcome.ok and "crashed" in (outcome.failure or "")  # llama.cpp aborted it
    with pytest.raises(RemoteUnreachable):  # and our own probe names the one that is gone
        probe("127.0.0.1", two_lent[0].settings.port, connect_timeout_s=1.0)
    assert probe("127.0.0.1", two_lent[1].settings.port).devices
