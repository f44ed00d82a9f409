"""How fast a lent computer's device runs a model's blocks, as measured through its RPC
server (engine.profiling.remote_steps measures it; the planner costs a split with it).

Two figures: how fast the device runs a block against this machine (whose profile the
planner knows in detail: a lent device's range is costed as this machine's plan for
those blocks, divided by that ratio), and what a step through it costs beyond its
compute (the client sends the graph and the activations, the server runs it, the
output comes back: round trips, transfers and the protocol's own work).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.remote.link_measure import LinkFigures

ACTIVATION_BYTES = 4  # llama.cpp passes f32 activations between devices


@dataclass(frozen=True)
class RemoteSpeed:
    """A lent device's speed, and what a step through its link costs, as measured."""

    block_s: float  # one micro-model block's one-token step on the lent device
    local_block_s: float  # the same block on this machine, for comparison
    block_bytes: int  # that block's weights
    step_overhead_s: float  # a step through the device, less the compute: the link's share
    n_embd: int  # the micro-model's widths, which the overhead was measured with
    n_vocab: int

    @property
    def times_this_machine(self) -> float:
        """How many times faster than this machine the device runs a block."""
        return self.local_block_s / self.block_s

    def hop_seconds(self, n_embd: int, n_vocab: int, link: LinkFigures, last: bool) -> float:
        """One decode step's cost of the hop to this device and back, for a model of these
        widths: the measured overhead, plus what the model's activations (or, from the last
        device, logits) add over the micro-model's at the link's bandwidth."""
        extra_up = max(n_embd - self.n_embd, 0) * ACTIVATION_BYTES
        back = n_vocab if last else n_embd
        extra_down = max(back - self.n_vocab, 0) * ACTIVATION_BYTES
        return (
            self.step_overhead_s
            + extra_up / link.upload_bytes_per_s
            + extra_down / link.download_bytes_per_s
        )

    def describe(self) -> str:
        return (
            f"{self.times_this_machine:.2f}x this computer's speed, "
            f"{self.step_overhead_s * 1000:.2f} ms a step through the link"
        )
