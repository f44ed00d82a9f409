"""A model split onto a lent computer over a rate-limited link: measured against the planner.

The lent computer is this build's RPC server in a network namespace the bench makes,
joined to this one by a veth pair whose both ends are rate-limited with `tc tbf` (this
kernel has no netem, so no delay is added: the measured round trip goes into the
prediction as it is). For each rate the bench measures the link as `devices add` does
(engine.remote.link_measure) and the lent device's speed through it
(engine.profiling.remote_steps: timed blocks there and here, and what a step through the
link adds), as `devices add` does; then it loads the default model with half its blocks
on the lent computer and times a greedy reply (prompt and decode tokens/s, from the
reply's statistics), beside engine.planning.split_costing's prediction for that split
from those measurements. The lent computer is this machine too (its cores serve both
halves in turn, one thread each, and the profile is read at one thread).

The planner's error on this machine alone is printed first: a split's prediction carries
it. Each rate runs twice: the output layer on the lent computer (the logits come back over
the link) and kept here ("head here", engine.planning.machine_split's output_here).
"of alone" is the split's decode speed as a share of this machine alone's, measured
and predicted side by side; "added ms/token" is what the split adds to a token over
this machine alone, measured, beside the predicted link term ("link ms/token").

Needs root (ip netns, tc) and a stored profile of this machine (shardchat profile
--fast; the recorded one of the test suite otherwise).

    .venv/bin/python bench/lent_link.py [--rates 1gbit,10gbit] [--tokens 64]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from app.cli.commands.plan_command import load_profile_for_planning
from engine.errors import BadInputError
from engine.generation.sampling import SamplingSettings
from engine.llama.load_params import LoadParams
from engine.machine.profile import Profile
from engine.model.default_model import default_model_path
from engine.model.inventory import read_inventory
from engine.planning.machine_split import MachineSplit, RemoteShare
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan
from engine.planning.split_costing import Computer, MeasuredDevice, cost_split
from engine.profiling.remote_steps import measured_speed
from engine.remote.link_measure import LinkFigures, measure_link
from engine.remote.rpc_probe import RemoteError, RpcSession
from engine.remote.sharing import rpc_server_binary
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import load_model

RECORDED = Path(__file__).resolve().parent.parent / "tests/data/profile-epyc-2core-fast.json"
NAMESPACE = f"shardchat-lent-{os.getpid()}"
HOST_SIDE, LENT_SIDE = "vsc-host", "vsc-lent"
HOST_IP, LENT_IP, PORT = "10.231.7.1", "10.231.7.2", 50052
PROMPT = "Write a long story about a dragon who learns to bake bread."
# each side: the two "computers" share this machine's cores (two threads a side measured
# 6 ms a token slower, the idle side's threads spinning while the other computes)
THREADS = 1
N_CTX = 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1gbit,10gbit")
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    profile = this_machines_profile(THREADS)
    model = str(default_model_path())
    inventory = read_inventory(model)
    half = inventory.n_layer // 2
    split = MachineSplit(inventory.n_layer, half, (RemoteShare(f"{LENT_IP}:{PORT}", half),))
    head_here = replace(split, output_here=True)  # the logits never cross the link
    print(f"lent_link: {inventory.name}, {split.describe()}, {THREADS} threads, "
          f"{args.tokens} tokens; the lent computer is a namespace of this one")  # fmt: skip
    print(f"{'rate':>9} {'round trip':>10} {'up':>10} {'down':>10}  {'ms a step':>9}  "
          f"{'prompt tok/s':>12}  {'decode tok/s':>12}  {'predicted':>9}  {'error':>6}  "
          f"{'of alone':>8}  {'predicted':>9}  {'added ms/token':>14}  "
          f"{'link ms/token':>13}")  # fmt: skip
    _prompt, alone_tps = measured(model, None, args.tokens)
    alone = make_plan(inventory, profile, PlanRequest(0, n_ctx=N_CTX))
    predicted = alone_predicted = alone.predicted_decode_tokens_per_s
    print(f"{'alone':>9} {'':>43}  {_prompt:>12.1f}  {alone_tps:>12.1f}  {predicted:>9.1f}  "
          f"{predicted / alone_tps - 1:>+6.0%}", flush=True)  # fmt: skip
    with lent_computer():
        for rate in args.rates.split(","):
            limit(rate)
            with RpcSession.open(LENT_IP, PORT) as session:
                link = measure_link(session)
            speed = measured_speed(f"{LENT_IP}:{PORT}", threads=THREADS)
            here = Computer("this", profile, 0)
            lent = MeasuredDevice("lent", 0, speed)
            for variant, label in ((split, rate), (head_here, "head here")):
                cell = cost_split(inventory, N_CTX, here, [lent], [link], variant)
                prompt_tps, decode_tps = measured(model, variant, args.tokens)
                predicted = cell.decode_tokens_per_s
                print(f"{label:>9} {_link(link)}  {speed.step_overhead_s * 1000:>9.2f}  "
                      f"{prompt_tps:>12.1f}  {decode_tps:>12.1f}  {predicted:>9.1f}  "
                      f"{predicted / decode_tps - 1:>+6.0%}  {decode_tps / alone_tps:>8.2f}  "
                      f"{predicted / alone_predicted:>9.2f}  "
                      f"{(1 / decode_tps - 1 / alone_tps) * 1000:>14.2f}  "
                      f"{cell.link_s * 1000:>13.2f}", flush=True)  # fmt: skip
    return 0


def this_machines_profile(threads: int) -> Profile:
    """This machine's profile, its CPU figures at `threads` only (as the bench runs)."""
    try:
        profile = load_profile_for_planning(None)
    except BadInputError:
        print(f"lent_link: no stored profile of this machine; using {RECORDED.name}")
        profile = load_profile_for_planning(str(RECORDED))
    kernels = tuple(point for point in profile.cpu_kernels if point.threads == threads)
    return replace(profile, cpu_kernels=kernels)


def _link(link: LinkFigures) -> str:
    up, down = link.upload_bytes_per_s * 8 / 1e9, link.download_bytes_per_s * 8 / 1e9
    return f"{link.round_trip_s * 1000:>8.3f}ms {up:>6.2f}Gb/s {down:>6.2f}Gb/s"


def measured(model: str, split: MachineSplit | None, tokens: int) -> tuple[float, float]:
    """Prompt and decode tokens/s of a greedy reply on the split (None: this machine alone)."""
    params = LoadParams(model, n_ctx=N_CTX, n_threads=THREADS, n_parallel=0, n_ctx_shared=0)
    loaded = load_model(split.load_params(params) if split is not None else params)
    try:
        settings = SamplingSettings(temperature=0.0, max_tokens=tokens)
        stats = ChatSession(loaded).reply(PROMPT, settings).stats
    finally:
        loaded.close()
    return stats.prompt_tokens / stats.time_to_first_token_s, stats.decode_tokens_per_s


@contextlib.contextmanager
def lent_computer() -> Iterator[None]:
    """The namespace, the veth pair and this build's RPC server in it, all gone after."""
    run("ip", "netns", "add", NAMESPACE)
    server = None
    try:
        run("ip", "link", "add", HOST_SIDE, "type", "veth", "peer", "name", LENT_SIDE)
        run("ip", "link", "set", LENT_SIDE, "netns", NAMESPACE)
        run("ip", "addr", "add", f"{HOST_IP}/24", "dev", HOST_SIDE)
        run("ip", "link", "set", HOST_SIDE, "up")
        inside("ip", "addr", "add", f"{LENT_IP}/24", "dev", LENT_SIDE)
        inside("ip", "link", "set", LENT_SIDE, "up")
        inside("ip", "link", "set", "lo", "up")
        server = subprocess.Popen(
            ["ip", "netns", "exec", NAMESPACE, str(rpc_server_binary()), "-H", LENT_IP,
             "-p", str(PORT), "-d", "CPU", "-t", str(THREADS)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until_serving()
        yield
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        subprocess.run(["ip", "netns", "del", NAMESPACE], check=False)
        subprocess.run(["ip", "link", "del", HOST_SIDE], check=False, stderr=subprocess.DEVNULL)


def wait_until_serving() -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with RpcSession.open(LENT_IP, PORT, connect_timeout_s=1.0):
                return
        except RemoteError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # a port that is not open yet: nothing to wait on


def limit(rate: str) -> None:
    """Both directions to `rate` (tc tbf), with a burst of about 2 ms at that rate."""
    bits = _bits(rate)
    burst = max(bits // 8 // 500, 64 * 1024)
    shaping = ["root", "tbf", "rate", rate, "burst", str(burst), "latency", "50ms"]
    run("tc", "qdisc", "replace", "dev", HOST_SIDE, *shaping)
    inside("tc", "qdisc", "replace", "dev", LENT_SIDE, *shaping)


def _bits(rate: str) -> int:
    units = {"gbit": 10**9, "mbit": 10**6, "kbit": 10**3}
    for unit, scale in units.items():
        if rate.endswith(unit):
            return int(float(rate[: -len(unit)]) * scale)
    raise SystemExit(f"lent_link: not a rate: {rate} (e.g. 1gbit, 100mbit)")


def run(*command: str) -> None:
    subprocess.run(command, check=True)


def inside(*command: str) -> None:
    run("ip", "netns", "exec", NAMESPACE, *command)


if __name__ == "__main__":
    sys.exit(main())
