"""How fast a lent computer's device runs a model's blocks, measured through its RPC server.

The planner needs two figures for a lent device: how fast it runs a block against
this machine (whose profile the planner knows in detail: a lent device's range is
costed as this machine's plan for those blocks, divided by that ratio), and what a
step through it costs beyond its compute (the client sends the graph and the
activations, the server runs it, the output comes back: round trips, transfers and the
protocol's own work). Both are measured the way the chat will use the device, with
the profiler's differential method: a one-block and a (1 + k)-block micro-model, all
their layers on the lent device, timed one-token steps, and the same here. Their
difference over k is one block's time; the one-block model's step, less its block,
less the same step on this machine, is what the link adds to every step.

llama.cpp's RPC client aborts the process whose server dies or misbehaves, so the
measurement runs in a child process (engine.child_process) and only its figures come
back. Blocks are small there (tensors under the server's 10 MiB cache threshold are
sent at every load), so a measurement sends some 50 MiB over the link.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil

from engine.child_process import run_in_child
from engine.profiling.cpu_steps import repeats_for
from engine.profiling.decode_timer import DecodeTimer
from engine.profiling.micro_models import DENSE, block_of, model_pair
from engine.remote.link_measure import LinkFigures
from engine.remote.rpc_probe import RemoteError

QUANT = "Q8_0"  # written directly, no quantize pass: a measurement takes seconds
STREAMED_BYTES = 48 * 2**20
ALL_LAYERS = 9999
REPEATS = 5
TIMEOUT_S = 300.0
MIN_SECONDS = 1e-7
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


def measure_remote_speed(
    endpoint: str, folder: str, threads: int | None = None, repeats: int = REPEATS
) -> RemoteSpeed:
    """The speed of the (probed) RPC server at host:port, and this machine's on `threads`
    (default: one a physical core); run it in a child process.

    The steps there and here alternate within every round, so a moment when this
    (shared) machine is busy slows both sides of a round, not one side's figures."""
    from engine.llama.rpc_devices import rpc_server_devices  # loads llama.cpp: child only

    one, more, extra = model_pair(Path(folder), DENSE, QUANT, STREAMED_BYTES)
    block, _share = block_of(one)
    devices = rpc_server_devices((endpoint,))
    threads = threads or psutil.cpu_count(logical=False) or 1

    def timer(path: Path, on: list[int] | None) -> DecodeTimer:
        layers = ALL_LAYERS if on is not None else 0
        return DecodeTimer(
            path, n_ctx=64, n_batch=1, threads=threads, n_gpu_layers=layers, devices=on
        )

    rounds: list[tuple[float, float, float, float]] = []
    with (
        timer(one, devices) as there_one,
        timer(more, devices) as there_more,
        timer(one, None) as here_one,
        timer(more, None) as here_more,
    ):
        timers = (there_one, there_more, here_one, here_more)
        for each in timers:
            each.time_step(1, 0, 1, 1)  # page in, size the buffers
        for _ in range(repeats_for(1, repeats)):
            a, b, c, d = (each.time_step(1, 0, 1, 1) for each in timers)
            rounds.append((a, b, c, d))
    there_step, there_block = _median_block(rounds, 0, extra)
    here_step, here_block = _median_block(rounds, 2, extra)
    overhead = (there_step - there_block) - (here_step - here_block)
    return RemoteSpeed(
        block_s=there_block,
        local_block_s=here_block,
        block_bytes=block.n_bytes,
        step_overhead_s=max(overhead, 0.0),
        n_embd=DENSE.n_embd,
        n_vocab=DENSE.vocab_size,
    )


def _median_block(
    rounds: list[tuple[float, float, float, float]], first: int, extra: int
) -> tuple[float, float]:
    """The one-block model's median step and one block's median time, from the rounds'
    timings at `first` (the one-block model) and after it (the 1 + extra one)."""
    steps = [timings[first] for timings in rounds]
    blocks = [(timings[first + 1] - timings[first]) / extra for timings in rounds]
    return statistics.median(steps), max(statistics.median(blocks), MIN_SECONDS)


def measured_speed(
    endpoint: str, threads: int | None = None, timeout_s: float = TIMEOUT_S
) -> RemoteSpeed:
    """`measure_remote_speed` in a child process; RemoteError when it fails there (the
    server died or went away mid-measurement, or it took longer than `timeout_s`)."""
    with tempfile.TemporaryDirectory(prefix="shardchat-remote-speed-") as folder:
        outcome = run_in_child(
            measure_remote_speed, (endpoint, folder, threads), timeout_s, label="remote-speed"
        )
    if not outcome.ok:
        raise RemoteError(f"could not measure the speed of {endpoint}: {outcome.failure}")
    speed: RemoteSpeed = outcome.value
    return speed
