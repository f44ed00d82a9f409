"""Measuring a lent computer's device through its RPC server: engine.remote.remote_speed.

Measured the way the chat will use the device, with the profiler's differential
method: a one-block and a (1 + k)-block micro-model, all their layers on the lent
device, timed one-token steps, and the same here. Their difference over k is one
block's time; the one-block model's step, less its block, less the same step on this
machine, is what the link adds to every step.

llama.cpp's RPC client aborts the process whose server dies or misbehaves, so the
measurement runs in a child process (engine.child_process) and only its figures come
back. Blocks are small there (tensors under the server's 10 MiB cache threshold are
sent at every load), so a measurement sends some 70 MiB over the link.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import psutil

from engine.child_process import run_in_child
from engine.profiling.cpu_steps import repeats_for
from engine.profiling.decode_timer import DecodeTimer
from engine.profiling.micro_models import DENSE, block_of, model_pair
from engine.remote.remote_speed import RemoteSpeed
from engine.remote.rpc_probe import RemoteError

QUANT = "Q8_0"  # written directly, no quantize pass: a measurement takes seconds
STREAMED_BYTES = 48 * 2**20
ALL_LAYERS = 9999
REPEATS = 5
TIMEOUT_S = 300.0
MIN_SECONDS = 1e-7


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
