"""What a model split across computers is predicted to do, against this machine alone.

A computer described by a profile (a machine of the bench's, or this one) runs its
range of blocks under its own plan (the planner, on that profile and VRAM budget: its
resident set, streaming, threads), so a range costs what the planner predicts for those
blocks there. A lent device measured through its RPC server (`shardchat devices add`,
engine.profiling.remote_steps) holds its range whole; it costs what this computer's plan
predicts for those blocks, divided by how many times faster than this computer the
device ran the same blocks when it was measured.

What the split adds is the link: llama.cpp's RPC client drives every lent device from
this process, so each decode step sends each remote range its input activations
(n_embd x tokens x 4 bytes), waits for its graph to run, and reads its output back (the
activations, or the logits from the last range). For a described link that is two round
trips, two transfers and the client's fixed work per range and step; for a measured
device, what a step through it cost beyond its compute when it was measured, plus what
the model's wider activations add. Loading sends each remote its weights once (its
tensor cache keeps them for the next load).

The split is chosen over this machine alone only when it is predicted faster, or when
the model does not fit this machine (then the prediction says so).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from engine.errors import BadInputError
from engine.machine.profile import Profile
from engine.model.inventory import BlockInventory, ModelInventory
from engine.planning.machine_split import (
    MachineSplit,
    output_bytes,
    output_sublayers,
    split_across,
)
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan
from engine.remote.link_measure import LinkFigures
from engine.remote.remote_speed import ACTIVATION_BYTES, RemoteSpeed

RAM_MARGIN = 2**30  # of a computer's available memory, left to its system and the app
# The RPC client's own work a step, per remote range, beyond round trips and transfers
# (the graph serialised and sent, the server's dispatch): bench/lent_link.py measured a
# split over a 10 Gbit link at about 1 ms a token more than its round trips and transfers.
RPC_STEP_S = 0.001


@dataclass(frozen=True)
class Computer:
    """A computer as the planner sees it: its profile and what it gives the model."""

    name: str
    profile: Profile
    vram_budget_bytes: int
    room_bytes: int | None = None  # what it gives the model, where known better than the
    # profile's free memory (this computer: what is free now, or what the user said)

    @property
    def memory_bytes(self) -> int:
        """What its blocks may take in all: its room, or its VRAM budget and the RAM its
        profile found available, less a margin."""
        if self.room_bytes is not None:
            return self.room_bytes
        available = self.profile.hardware.get("memory", {}).get("available_bytes", 0)
        return max(int(available) - RAM_MARGIN, 0) + self.vram_budget_bytes


@dataclass(frozen=True)
class MeasuredDevice:
    """A lent computer's device, measured through its RPC server against this computer
    (all of its range lives there: the server has no streaming)."""

    name: str
    budget_bytes: int
    speed: RemoteSpeed

    @property
    def memory_bytes(self) -> int:
        return self.budget_bytes


Placed = Computer | MeasuredDevice  # what a range of blocks may run on


@dataclass(frozen=True)
class SplitPrediction:
    split: MachineSplit
    decode_tokens_per_s: float
    compute_s: tuple[float, ...]  # one decode step's compute on each computer, this one first
    link_s: float  # one decode step's time on the links
    load_transfer_s: float  # the weights sent to the lent computers, once
    alone_tokens_per_s: float | None  # this computer alone; None where the model does not fit
    chosen: bool  # the split is worth it: faster, or the only way the model runs

    def describe(self) -> str:
        alone = (
            "does not fit this computer alone"
            if self.alone_tokens_per_s is None
            else f"{self.alone_tokens_per_s:.2f} tok/s alone"
        )
        return (
            f"{self.decode_tokens_per_s:.2f} tok/s split ({self.split.describe()}; links "
            f"{self.link_s * 1000:.2f} ms a token, {self.load_transfer_s:.0f} s to send the "
            f"weights once), {alone}"
        )


def predict_split(
    inventory: ModelInventory,
    n_ctx: int,
    here: Computer,
    lent: Sequence[Placed],
    links: Sequence[LinkFigures],
) -> SplitPrediction:
    """The fastest contiguous split over this computer and the `lent` ones (whose links
    are `links`, in order), against this one alone. The candidates keep less and less
    here (all it holds, down to its VRAM budget and nothing), the lent computers taking
    the rest in order, each with the output layer on the last lent device or here (over a
    slow link the logits cost more than the head); BadInputError when none holds the model."""
    remotes = [(computer.name, computer.memory_bytes) for computer in lent]
    alone = _alone_tokens_per_s(inventory, n_ctx, here)
    best: SplitPrediction | None = None
    for room, output_here in itertools.product(_rooms_here(here), (False, True)):
        try:
            split = split_across(inventory, n_ctx, room, remotes, output_here)
        except BadInputError:
            continue
        if not split.uses_remotes:
            continue  # that is this computer alone
        costed = cost_split(inventory, n_ctx, here, lent, links, split, alone)
        if best is None or costed.decode_tokens_per_s > best.decode_tokens_per_s:
            best = costed
    if best is None:
        split_across(inventory, n_ctx, here.memory_bytes, remotes)  # says why it does not fit
        raise BadInputError("the lent computers can take none of this model's blocks")
    return best


def _rooms_here(here: Computer) -> list[int]:
    steps = 12
    rooms = {here.memory_bytes * step // steps for step in range(steps, -1, -1)}
    rooms.add(here.vram_budget_bytes)
    return sorted(rooms, reverse=True)


def cost_split(
    inventory: ModelInventory,
    n_ctx: int,
    here: Computer,
    lent: Sequence[Placed],
    links: Sequence[LinkFigures],
    split: MachineSplit,
    alone: float | None = None,
) -> SplitPrediction:
    """The prediction for one given split (`alone`: this computer's own speed, if known)."""
    ranges = _ranges(split)
    holding = [number for number, (start, end) in enumerate(ranges) if end > start]
    computers: list[Placed] = [here, *lent]
    head_on = 0 if split.output_here else holding[-1]  # the range that runs the output layer
    compute = tuple(
        _range_seconds(inventory, n_ctx, here, computer, start, end, head=number == head_on)
        for number, (computer, (start, end)) in enumerate(zip(computers, ranges, strict=True))
    )
    used = [index for index, share in enumerate(split.shares) if share.blocks]
    logits_back = None if split.output_here else used[-1]  # the lent device that sends them
    link_s = sum(
        _hop_seconds(inventory, lent[index], links[index], last=index == logits_back)
        for index in used
    )
    shipped = _shipped_bytes(inventory, split)
    load_s = sum(shipped[i] / links[i].upload_bytes_per_s for i in used)
    tokens_per_s = 1.0 / (sum(compute) + link_s)
    chosen = alone is None or tokens_per_s > alone
    return SplitPrediction(split, tokens_per_s, compute, link_s, load_s, alone, chosen)


def _ranges(split: MachineSplit) -> list[tuple[int, int]]:
    ranges, start = [(0, split.local_blocks)], split.local_blocks
    for share in split.shares:
        ranges.append((start, start + share.blocks))
        start += share.blocks
    return ranges


def _range_seconds(
    inventory: ModelInventory,
    n_ctx: int,
    here: Computer,
    computer: Placed,
    start: int,
    end: int,
    head: bool,
) -> float:
    """One decode step of blocks [start, end) on `computer`, under its own plan (the output
    head too where `head`); on a measured lent device, under this computer's CPU plan, at
    the device's speed against this computer's."""
    if start == end and not head:
        return 0.0
    globals_ = output_sublayers(inventory) if head else ()
    part = replace(
        inventory, n_layer=end - start, blocks=_renumbered(inventory, start, end), globals=globals_
    )
    if isinstance(computer, MeasuredDevice):
        plan = make_plan(part, here.profile, PlanRequest(0, n_ctx=n_ctx))
        return 1.0 / plan.predicted_decode_tokens_per_s / computer.speed.times_this_machine
    budget = min(computer.vram_budget_bytes, _vram(computer.profile))
    plan = make_plan(part, computer.profile, PlanRequest(budget, n_ctx=n_ctx))
    return 1.0 / plan.predicted_decode_tokens_per_s


def _renumbered(inventory: ModelInventory, start: int, end: int) -> tuple[BlockInventory, ...]:
    """Blocks [start, end) as a model of their own (the planner indexes blocks by number)."""
    return tuple(
        replace(
            block,
            index=block.index - start,
            sublayers=tuple(
                replace(sub, block=None if sub.block is None else sub.block - start)
                for sub in block.sublayers
            ),
        )
        for block in inventory.blocks[start:end]
    )


def _hop_seconds(inventory: ModelInventory, lent: Placed, link: LinkFigures, last: bool) -> float:
    """One decode step's traffic to a remote range and back."""
    n_embd, n_vocab = inventory.n_embd or 0, inventory.n_vocab or 0
    if isinstance(lent, MeasuredDevice):
        return lent.speed.hop_seconds(n_embd, n_vocab, link, last)
    activations = n_embd * ACTIVATION_BYTES
    back = n_vocab * ACTIVATION_BYTES if last else activations
    return (
        2 * link.round_trip_s
        + RPC_STEP_S
        + activations / link.upload_bytes_per_s
        + back / link.download_bytes_per_s
    )


def _shipped_bytes(inventory: ModelInventory, split: MachineSplit) -> list[int]:
    shipped, start = [], split.local_blocks
    used = [index for index, share in enumerate(split.shares) if share.blocks]
    for index, share in enumerate(split.shares):
        blocks = sum(block.n_bytes for block in inventory.blocks[start : start + share.blocks])
        head = bool(used) and index == used[-1] and not split.output_here
        shipped.append(blocks + (output_bytes(inventory) if head else 0))
        start += share.blocks
    return shipped


def _alone_tokens_per_s(inventory: ModelInventory, n_ctx: int, here: Computer) -> float | None:
    weights = sum(block.n_bytes + block.kv_cache_bytes(n_ctx) for block in inventory.blocks)
    weights += sum(sublayer.n_bytes for sublayer in inventory.globals)
    if weights > here.memory_bytes:
        return None
    budget = min(here.vram_budget_bytes, _vram(here.profile))
    plan = make_plan(inventory, here.profile, PlanRequest(budget, n_ctx=n_ctx))
    return plan.predicted_decode_tokens_per_s


def _vram(profile: Profile) -> int:
    return profile.gpu.vram_total_bytes if profile.gpu is not None else 0
