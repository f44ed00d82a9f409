"""How a model's blocks are split between this machine and lent computers (issue 31).

Until the planner costs the links (the activations crossing each hop, the round
trips, the remote compute), the split is the simplest one that keeps hops few:
contiguous ranges. This machine keeps the first blocks its budget holds (and the
embeddings, which llama.cpp always keeps on the CPU), each lent device in order takes
the next blocks its budget holds, and the output layer rides with the last range.

llama.cpp places exactly such a split from two parameters: it offloads the last
`n_gpu_layers` layers (the output layer counted as one) to its devices, in order,
each the share `tensor_split` gives it. So a split is those two numbers and the list
of RPC servers, and llama.cpp's buffer lines show whether it was followed.

Over a slow link the output layer is better kept here (`output_here`): the last range
then sends back its activations (n_embd floats a token) instead of the logits (n_vocab
floats, 0.6 MB a token for a 152k vocabulary), and this machine computes the head. The
offload stays as it is and tensor buffer overrides keep the output tensors (for a tied
head, llama.cpp's copy of the token embedding) in CPU memory, where their operations
then run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

from engine.errors import BadInputError
from engine.llama.device_buffers import DeviceBuffers
from engine.llama.load_params import LoadParams
from engine.model.inventory import ModelInventory, SubLayer, SubLayerKind

GIB = 2**30
MIB = 2**20
# the output layer's tensors, kept in CPU memory (a tied head's is the token embedding's copy)
OUTPUT_HERE = ((r"^(output|output_norm|token_embd)\.", "CPU"),)


@dataclass(frozen=True)
class RemoteShare:
    """The contiguous blocks one lent device runs."""

    endpoint: str  # host:port of its RPC server (one device each, for now)
    blocks: int


@dataclass(frozen=True)
class MachineSplit:
    n_layer: int
    local_blocks: int  # the first blocks, on this machine
    shares: tuple[RemoteShare, ...]  # then each lent device's, in order
    output_here: bool = False  # the output layer on this machine, not the last lent device

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> MachineSplit:
        data = json.loads(text)
        shares = tuple(RemoteShare(share["endpoint"], share["blocks"]) for share in data["shares"])
        return cls(
            data["n_layer"], data["local_blocks"], shares, bool(data.get("output_here", False))
        )

    @property
    def uses_remotes(self) -> bool:
        return any(share.blocks for share in self.shares)

    def load_params(self, params: LoadParams) -> LoadParams:
        """`params` loading this split: the servers, the offloaded layers and their shares
        (the output layer is the last device's, or held here by overrides)."""
        used = [share for share in self.shares if share.blocks]
        if not used:
            return replace(params, rpc_servers=(), tensor_split=(), n_gpu_layers=0)
        counts = [float(share.blocks) for share in used]
        counts[-1] += 1  # the output layer
        overrides = params.tensor_overrides + (OUTPUT_HERE if self.output_here else ())
        return replace(
            params,
            rpc_servers=tuple(share.endpoint for share in used),
            n_gpu_layers=self.n_layer + 1 - self.local_blocks,
            tensor_split=tuple(counts),
            tensor_overrides=overrides,
        )

    def describe(self) -> str:
        ranges, start = [f"blocks 0-{self.local_blocks - 1} here"], self.local_blocks
        if self.local_blocks == 0:
            ranges = ["no blocks here"]
        for share in self.shares:
            if share.blocks:
                ranges.append(f"{start}-{start + share.blocks - 1} on {share.endpoint}")
                start += share.blocks
        if not self.uses_remotes:
            return ", ".join(ranges)
        output = "the output layer here" if self.output_here else "and the output layer"
        return ", ".join(ranges) + f" ({output})"


def output_sublayers(inventory: ModelInventory) -> tuple[SubLayer, ...]:
    """What the device that runs the output layer holds of it: the output head and its
    norm, and for a tied head llama.cpp's copy of the token embedding."""
    kinds = {SubLayerKind.OUTPUT_HEAD, SubLayerKind.OUTPUT_NORM}
    if inventory.tied_output or not any(
        s.kind is SubLayerKind.OUTPUT_HEAD for s in inventory.globals
    ):
        kinds.add(SubLayerKind.TOKEN_EMBEDDING)
    return tuple(sublayer for sublayer in inventory.globals if sublayer.kind in kinds)


def output_bytes(inventory: ModelInventory) -> int:
    return sum(sublayer.n_bytes for sublayer in output_sublayers(inventory))


@dataclass(frozen=True)
class HeldShare:
    """What one lent device was planned to hold of the weights, and what llama.cpp put there."""

    endpoint: str
    planned_bytes: int
    allocated_bytes: int

    @property
    def as_planned(self) -> bool:
        """Within 2% (and a MiB: llama.cpp prints MiB with two decimals)."""
        return abs(self.allocated_bytes - self.planned_bytes) <= 0.02 * self.planned_bytes + MIB


def held_shares(
    split: MachineSplit, inventory: ModelInventory, buffers: DeviceBuffers
) -> list[HeldShare]:
    """Each lent device's weights as planned beside llama.cpp's `model` buffer on it (its
    buffer types are named `RPC<index on that server>[host:port]`)."""
    used = [share for share in split.shares if share.blocks]
    held, start = [], split.local_blocks
    for share in used:
        planned = sum(block.n_bytes for block in inventory.blocks[start : start + share.blocks])
        planned += output_bytes(inventory) if share is used[-1] and not split.output_here else 0
        allocated = sum(
            roles.get("model", 0)
            for name, roles in buffers.by_buffer.items()
            if name.endswith(f"[{share.endpoint}]")
        )
        held.append(HeldShare(share.endpoint, planned, allocated))
        start += share.blocks
    return held


def describe_held(held: Sequence[HeldShare]) -> str:
    """One line: whether llama.cpp placed the weights as planned, device by device."""
    parts = [
        f"{share.endpoint} {share.allocated_bytes / MIB:.1f} MiB of {share.planned_bytes / MIB:.1f}"
        for share in held
    ]
    verdict = (
        "as planned"
        if all(share.as_planned for share in held)
        else "NOT as planned (the split's speed prediction does not hold)"
    )
    return f"weights on the lent computers {verdict}: " + ", ".join(parts)


def split_across(
    inventory: ModelInventory,
    n_ctx: int,
    local_budget_bytes: int,
    remotes: Sequence[tuple[str, int]],
    output_here: bool = False,
) -> MachineSplit:
    """The contiguous split of `inventory`'s blocks (weights and KV cache for `n_ctx`):
    this machine first, then each (endpoint, budget) in order, the last one also holding
    the output layer unless `output_here`. BadInputError when all of them together cannot
    hold the model.

    This machine's budget holds the globals too (the input embedding stays on the CPU in
    llama.cpp); with no lent computer, it holds the whole model or the split fails."""
    blocks = [block.n_bytes + block.kv_cache_bytes(n_ctx) for block in inventory.blocks]
    globals_bytes = sum(sublayer.n_bytes for sublayer in inventory.globals)
    local = _fitting(blocks, 0, local_budget_bytes - globals_bytes)
    shares, start = [], local
    for number, (endpoint, budget) in enumerate(remotes):
        last = number == len(remotes) - 1 and not output_here
        taken = _fitting(blocks, start, budget - (output_bytes(inventory) if last else 0))
        shares.append(RemoteShare(endpoint, taken))
        start += taken
    if start < len(blocks):
        need = sum(blocks) + globals_bytes
        held = local_budget_bytes + sum(budget for _endpoint, budget in remotes)
        raise BadInputError(
            f"{inventory.name} needs {need / GIB:.2f} GiB with a {n_ctx}-token context; this "
            f"machine and the lent computers give it {held / GIB:.2f} GiB"
        )
    return MachineSplit(len(blocks), local, tuple(shares), output_here)


def _fitting(blocks: Sequence[int], start: int, budget: int) -> int:
    """How many blocks from `start` on fit `budget`."""
    used, count = 0, 0
    for size in blocks[start:]:
        if used + size > budget:
            break
        used, count = used + size, count + 1
    return count
