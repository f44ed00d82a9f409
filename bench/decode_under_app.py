"""A decode step under the whole app against the same step in the engine alone (issue 48).

The API trails llama-server, and each step was found to take longer inside
llama_decode under the app than the same scheduler driving the same streams alone.
This bench measures that gap and where the two cores go meanwhile. Each round
runs, each in a fresh process, in turn:

- engine: the default model loaded with the context `shardchat serve --parallel 8`
  gives it, 8 streams admitted straight into its scheduler and stepped in a loop;
- app: the engine worker and the API server in one process, as `shardchat serve`
  runs them, and 8 streaming clients of the official `openai` package in another
  process, as real clients are.

Both decode the same 8 questions greedily. Per round it prints the median
milliseconds of the steps that carry all 8 streams decoding (no prompt tokens) and
the app's ratio to the engine's. Where `perf sched record` works (root, or
perf_event_paranoid at most 1), it also says how each thread spent the serving
window: running, asleep (waiting for a lock, the GIL or work), and runnable but
waiting for a core, for the worker (ggml's thread 0), ggml's other threads, the API
server's loop and the clients.

    .venv/bin/python bench/decode_under_app.py [--rounds 3] [--threads 2] [--no-perf]

Figures, with what they show: docs/measurements.md, "A step under the app".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CLIENTS = 8
MAX_TOKENS = 96
N_CTX_PER_SLOT = 1024
QUESTIONS = [
    f"Write a paragraph about the number {n} and where it appears." for n in range(CLIENTS)
]
RESULT = "RESULT "


@dataclass
class Run:
    """One mode's serving window: its full steps' median ms and who used the cores."""

    mode: str
    median_ms: float
    full_steps: int
    threads: dict[str, dict[str, float]]  # role -> run, asleep, waiting ms


# --- what runs in each mode's own process ---


def full_step_ms(steps: list[Any]) -> list[float]:
    """Steps that carry every stream decoding: the step the two modes share."""
    return [1e3 * s.seconds for s in steps if s.n_tokens == CLIENTS and s.n_prompt_tokens == 0]


@contextlib.contextmanager
def scheduling_record(path: str | None) -> Iterator[None]:
    """`perf sched record` over the block (the whole machine), when asked and allowed."""
    if not path:
        yield
        return
    perf = subprocess.Popen(
        ["perf", "sched", "record", "-o", path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # perf opens its events before the block starts
    try:
        yield
    finally:
        perf.send_signal(signal.SIGINT)
        perf.wait()


def engine_alone(perf_path: str | None) -> dict[str, Any]:
    from app.model_lifecycle.load_planning import ContextShape
    from engine.generation.sampling import GREEDY
    from engine.generation.stream import StreamRequest
    from engine.llama.load_params import LoadParams
    from engine.model.chat_message import ChatMessage
    from engine.model.default_model import default_model_path
    from engine.runtime.loaded_model import load_model

    shape = ContextShape.for_server(CLIENTS, N_CTX_PER_SLOT)
    params = LoadParams(
        str(default_model_path()),
        n_ctx=2048,
        n_threads=int(os.environ["BENCH_THREADS"]),
        n_threads_batch=int(os.environ["BENCH_THREADS"]),
        n_parallel=shape.n_parallel,
        n_ctx_shared=shape.shared_cells,
        kv_unified=not shape.per_slot,  # as `shardchat serve` lays it out
    )
    model = load_model(params)
    steps: list[Any] = []
    model.scheduler.observers.append(steps.append)
    reply = GREEDY.with_changes(max_tokens=MAX_TOKENS, stop_loops=False)
    roles = {threading.get_native_id(): "worker (ggml thread 0)"}
    streams = []
    for seq, question in enumerate(QUESTIONS, start=1):
        prompt = model.chat_template.render([ChatMessage("user", question)])
        request = StreamRequest.of_tokens(model.tokenize_prompt(prompt), reply, reuse_cache=False)
        streams.append(model.scheduler.admit(request, seq, 0))
    with scheduling_record(perf_path):
        while not all(s.done for s in streams):
            model.scheduler.step()
    model.close()
    return {"steps": full_step_ms(steps), "roles": roles, "pid": os.getpid()}


CLIENT_SCRIPT = """
import asyncio, sys, openai
async def main(url, model, questions, max_tokens):
    client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
    async def one(question):
        stream = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": question}],
            temperature=0, max_tokens=max_tokens, stream=True)
        async for _chunk in stream:
            pass
    await asyncio.gather(*(one(q) for q in questions))
    await client.close()
asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[4:], int(sys.argv[3])))
"""


def whole_app(perf_path: str | None) -> dict[str, Any]:
    from app.api.server import ApiServer
    from app.api.server_config import ServerConfig
    from app.engine_host.events import ModelLoaded
    from app.engine_host.worker import EngineWorker
    from app.model_lifecycle.load_planning import ContextShape, LoadRequest
    from engine.model.default_model import default_model_path

    events: queue.Queue[object] = queue.Queue()
    worker = EngineWorker(events.put).start()
    shape = ContextShape.for_server(CLIENTS, N_CTX_PER_SLOT)
    threads = int(os.environ["BENCH_THREADS"])
    request = LoadRequest(str(default_model_path()), 2048, None, n_threads=threads, shape=shape)
    request_id = worker.load_planned(request)
    while getattr(event := events.get(timeout=600), "request_id", None) != request_id:
        pass
    if not isinstance(event, ModelLoaded):
        sys.exit(f"could not load the default model: {event}")
    config = ServerConfig(
        port=0, n_slots=CLIENTS, n_ctx_per_slot=N_CTX_PER_SLOT, max_queue=4 * CLIENTS
    )
    server = ApiServer(worker, config)
    url = server.start() + "/v1"
    steps: list[Any] = []
    roles: dict[int, str] = {threading.get_native_id(): "main (waits)"}
    if server._thread is not None and server._thread.native_id is not None:
        roles[server._thread.native_id] = "API server's loop"

    def observe(step: Any) -> None:
        roles.setdefault(threading.get_native_id(), "worker (ggml thread 0)")
        steps.append(step)

    model = worker._resident.model
    assert model is not None and worker.api.model is not None
    model.scheduler.observers.append(observe)
    client_command = [sys.executable, "-c", CLIENT_SCRIPT, url, worker.api.model.id]
    client = subprocess.Popen([*client_command, str(MAX_TOKENS), *QUESTIONS])
    with scheduling_record(perf_path):
        client.wait()
    server.stop()
    worker.shutdown()
    return {"steps": full_step_ms(steps), "roles": roles, "pid": os.getpid(), "client": client.pid}


# --- the bench's own process ---


SWITCH = re.compile(
    r"^\s*(\d+)/(\d+)\s+([\d.]+):.*?prev_pid=(\d+) .*prev_state=(\S+)"
    r" ==> .*next_pid=(\d+)"
)


def thread_times(perf_path: str, result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per role: milliseconds running, and how often and how long it was switched out
    while it could run (preempted) or because it waited (asleep), from the recorded
    sched_switch events."""
    lines = subprocess.run(
        ["perf", "script", "-i", perf_path, "-F", "pid,tid,time,trace", "--ns"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    roles = {int(tid): role for tid, role in result["roles"].items()}
    process_of: dict[int, int] = {}
    switched_in: dict[int, float] = {}
    switched_out: dict[int, tuple[float, str]] = {}
    totals: dict[str, dict[str, float]] = {}

    def role_of(tid: int) -> str | None:
        pid = process_of.get(tid)
        if pid is None:
            return None
        if pid == result["pid"]:
            return roles.get(tid, "ggml's other threads")
        if pid == result.get("client"):
            return "clients (another process)"
        return None

    def add(tid: int, field: str, ms: float) -> None:
        role = role_of(tid)
        if role is not None:
            slot = totals.setdefault(role, dict.fromkeys(KINDS, 0.0))
            slot[field] = slot.get(field, 0.0) + ms

    for line in lines:
        match = SWITCH.match(line)
        if match is None:
            continue
        pid, tid, when, prev, state, following = match.groups()
        now, prev_tid, next_tid = 1e3 * float(when), int(prev), int(following)
        process_of[int(tid)] = int(pid)
        if prev_tid in switched_in:
            add(prev_tid, "running", now - switched_in.pop(prev_tid))
        switched_out[prev_tid] = (now, state)
        if state.startswith("R") and role_of(prev_tid) in GGML_ROLES:
            taker = role_of(next_tid) or "other programs"
            add(prev_tid, f"preempted by {taker}", 1)
        if next_tid in switched_out:
            since, why = switched_out.pop(next_tid)
            kind = "preempted" if why.startswith("R") else "asleep"
            add(next_tid, kind, now - since)
            add(next_tid, f"{kind} times", 1)
        switched_in[next_tid] = now
    return totals


KINDS = ("running", "preempted", "preempted times", "asleep", "asleep times")
GGML_ROLES = ("worker (ggml thread 0)", "ggml's other threads")


def run_mode(mode: str, args: argparse.Namespace, perf_dir: str | None) -> Run:
    perf_path = str(Path(perf_dir, f"{mode}.data")) if perf_dir else ""
    env = {**os.environ, "BENCH_THREADS": str(args.threads), "BENCH_PERF": perf_path}
    done = subprocess.run(
        [sys.executable, __file__, "--mode", mode],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        sys.exit(f"the {mode} run failed:\n{done.stderr[-2000:]}")
    result = json.loads(lines[-1][len(RESULT) :])
    threads = thread_times(perf_path, result) if perf_path else {}
    steps = result["steps"]
    return Run(mode, statistics.median(steps) if steps else 0.0, len(steps), threads)


def perf_usable() -> bool:
    if shutil.which("perf") is None:
        return False
    with tempfile.TemporaryDirectory() as folder:
        check = subprocess.run(
            ["perf", "sched", "record", "-o", str(Path(folder, "check.data")), "true"],
            capture_output=True,
            check=False,
        )
    return check.returncode == 0


def print_threads(run: Run) -> None:
    print(f"\n{run.mode}: the serving window per thread (ms, and times switched out)")
    print(f"{'thread':<28}{'running':>9}{'preempted':>17}{'asleep':>17}")
    for role, t in sorted(run.threads.items(), key=lambda item: -item[1]["running"]):
        print(
            f"{role:<28}{t['running']:>9.0f}"
            f"{t['preempted']:>9.0f} ({t['preempted times']:>4.0f}x)"
            f"{t['asleep']:>9.0f} ({t['asleep times']:>4.0f}x)"
        )
    takers: dict[str, float] = {}
    for role in GGML_ROLES:
        for key, count in run.threads.get(role, {}).items():
            if key.startswith("preempted by "):
                taker = key.removeprefix("preempted by ")
                takers[taker] = takers.get(taker, 0) + count
    if takers:
        said = ", ".join(f"{who} {n:.0f}" for who, n in sorted(takers.items(), key=lambda i: -i[1]))
        print(f"ggml's threads preempted by: {said}")


def compare(args: argparse.Namespace) -> None:
    perf = not args.no_perf and perf_usable()
    if not args.no_perf and not perf:
        print("perf sched cannot record here: step times only", file=sys.stderr)
    ratios: list[float] = []
    print(f"{'round':>5}{'engine ms':>11}{'app ms':>9}{'app/engine':>12}{'full steps':>12}")
    with tempfile.TemporaryDirectory() as perf_dir:
        for round_no in range(1, args.rounds + 1):
            alone = run_mode("engine", args, perf_dir if perf else None)
            under = run_mode("app", args, perf_dir if perf else None)
            ratios.append(under.median_ms / alone.median_ms)
            print(
                f"{round_no:>5}{alone.median_ms:>11.1f}{under.median_ms:>9.1f}"
                f"{ratios[-1]:>11.2f}x{alone.full_steps:>6} /{under.full_steps:>4}",
                flush=True,
            )
        print(f"median of {args.rounds} rounds: {statistics.median(ratios):.2f}x")
        if perf:
            print_threads(alone)
            print_threads(under)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-perf", action="store_true", help="step times only")
    parser.add_argument("--mode", choices=("engine", "app"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode is None:
        compare(args)
        return
    perf_path = os.environ.get("BENCH_PERF") or None
    result = engine_alone(perf_path) if args.mode == "engine" else whole_app(perf_path)
    print(RESULT + json.dumps(result))


if __name__ == "__main__":
    main()
