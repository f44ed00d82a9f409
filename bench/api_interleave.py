"""The conversation beside API clients and a summary job: this tree against an earlier one.

Every activity on a loaded model is a sequence of its one context, and one
llama_decode carries them all (engine.generation.scheduler): the GUI's reply
rides the same steps as 8 API streams or a 16-document summary job instead
of taking turns with them. This measures, with the default model, through
the engine worker, the API server and the official `openai` client (its
clients in a process of their own, as other programs are):

- the GUI reply alone: decode tokens/s and its median time between tokens;
- 8 API clients alone, and a 16-document summary job alone: tokens/s (the clients'
  from the moment they send their requests to their last chunk);
- the GUI reply while the 8 clients stream, and while the job runs: the
  GUI's tokens/s and time between tokens, and the aggregate tokens/s of all
  (the others' tokens counted inside the GUI reply's window).

Each tree is measured in a fresh process of its own, the two in turn, --rounds
times; the table has each figure's median per tree and the ratio. The
baseline (--against, default 152eb95: the last commit with three contexts
per model, one each for the conversation, the API pool and a batch job) is
checked out as a git worktree for the run.

    .venv/bin/python bench/api_interleave.py [--against REF] [--rounds 2] [--threads 2]

Last run (2026-12-07, 2-core machine, 2 rounds, the clients timed from their
requests; docs/measurements.md, "One context against three", has the table): the
8 clients alone 1.08x the baseline's, the GUI beside them 71.8 tok/s against 18.5,
its time between tokens 0.97x alone (median; mean 1.41x), a summary job alone 0.84x.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GUI_PROMPT = "Tell me a long story about a lighthouse keeper and a storm."
API_PROMPTS = [f"Write a paragraph about the number {n} and where it appears." for n in range(64)]
TOPICS = ("rivers", "bridges", "bees", "glass", "maps", "salt", "clocks", "kites")
THREE_CONTEXTS = "152eb95"


def host_module(name: str) -> Any:
    """An engine host module of the tree this process runs in: in app/engine_host/ since the
    folders were regrouped, directly in app/ in the baseline."""
    package = "app.engine_host" if Path("app", "engine_host").is_dir() else "app"
    return importlib.import_module(f"{package}.{name}")


@dataclass
class Reply:
    """A GUI reply as the window sees it: decode tokens/s and when each piece arrived."""

    tokens: int
    seconds: float
    stamps: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def median_gap_ms(self) -> float:
        gaps = [b - a for a, b in zip(self.stamps, self.stamps[1:], strict=False)]
        return 1e3 * statistics.median(gaps) if gaps else 0.0

    @property
    def window(self) -> tuple[float, float]:
        return self.stamps[0], self.stamps[-1]


class Engine:
    """The worker with the default model loaded and the API server on a loopback port."""

    def __init__(self, threads: int, clients: int) -> None:
        from app.api.server import ApiServer

        if Path("app", "api", "server_config.py").is_file():
            from app.api.server_config import ServerConfig
        else:  # the three-context baseline keeps it beside the server
            from app.api.server import ServerConfig  # type: ignore[attr-defined,no-redef]

        ModelLoaded = host_module("events").ModelLoaded
        EngineWorker = host_module("worker").EngineWorker
        from engine.model.default_model import default_model_path

        self.events: queue.Queue = queue.Queue()
        self.progress: list[tuple[float, int]] = []  # (when, the job's tokens so far)
        self.worker = EngineWorker(self._on_event).start()
        shape = {}
        if Path("app", "model_lifecycle").is_dir():  # one context, as the window serves:
            from app.model_lifecycle.load_planning import ContextShape, LoadRequest

            # the clients share a pool beside the conversation
            shape = {"shape": ContextShape(clients, clients * 1024)}
        else:  # the three-context baseline (the process runs in its tree)
            from app.load_planning import LoadRequest  # type: ignore[no-redef]
        request = LoadRequest(str(default_model_path()), 2048, None, n_threads=threads, **shape)
        loaded = self.wait(self.worker.load_planned(request))
        if not isinstance(loaded, ModelLoaded):
            sys.exit(f"could not load the default model: {loaded}")
        config = ServerConfig(port=0, n_slots=clients, n_ctx_per_slot=1024, max_queue=64)
        self.server = ApiServer(self.worker, config)
        self.base_url = self.server.start() + "/v1"
        assert self.worker.api.model is not None
        self.model_id = self.worker.api.model.id
        self._gui_stamps: list[float] = []
        self._gui_id = -1

    def _on_event(self, event: object) -> None:
        events = host_module("events")
        JobProgressed, TokenStreamed = events.JobProgressed, events.TokenStreamed

        now = time.perf_counter()
        if isinstance(event, TokenStreamed) and event.request_id == self._gui_id:
            self._gui_stamps.append(now)
        elif isinstance(event, JobProgressed):
            self.progress.append((now, event.progress.generated_tokens))
        self.events.put(event)

    def wait(self, request_id: int) -> object:
        RequestFailed = host_module("events").RequestFailed

        while True:
            event = self.events.get(timeout=900)
            if getattr(event, "request_id", None) == request_id:
                if isinstance(event, RequestFailed):
                    sys.exit(f"request failed: {event.message}")
                if type(event).__name__ not in ("TokenStreamed", "JobProgressed"):
                    return event

    def gui_reply(self, max_tokens: int) -> Reply:
        from engine.generation.sampling import GREEDY

        self.wait(self.worker.start_conversation())
        settings = GREEDY.with_changes(max_tokens=max_tokens, stop_loops=False)
        self._gui_stamps = []
        self._gui_id = self.worker.send_message(GUI_PROMPT, settings)
        done = self.wait(self._gui_id)
        stats = done.stats  # type: ignore[attr-defined]
        decode_seconds = (stats.generated_tokens - 1) / max(stats.decode_tokens_per_s, 1e-9)
        return Reply(stats.generated_tokens - 1, decode_seconds, list(self._gui_stamps))

    def job_tokens_at(self, when: float) -> float:
        """The job's generated tokens at `when`, between its progress reports."""
        points = [(0.0, 0)] + self.progress
        for (t0, n0), (t1, n1) in zip(points, points[1:], strict=False):
            if t0 <= when <= t1:
                return n0 + (n1 - n0) * (when - t0) / max(t1 - t0, 1e-9)
        return float(points[-1][1])

    def close(self) -> None:
        self.server.stop()
        self.worker.shutdown()


class ApiLoad:
    """N streaming clients in a process of their own, as other programs are: their CPU
    (about 2 ms a token in the `openai` package) and their share of a GIL are not the
    server's. Each content chunk is stamped with the system-wide monotonic clock
    (time.perf_counter), so the stamps compare with this process's."""

    def __init__(self, engine: Engine, clients: int, max_tokens: int) -> None:
        self.started = threading.Event()
        self.sent = 0.0  # when the clients sent their requests
        self.stamps: list[float] = []
        command = [
            sys.executable, __file__, "--clients-of", engine.base_url, "--model",
            engine.model_id, "--clients", str(clients), "--max-tokens", str(max_tokens),
        ]  # fmt: skip
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            if line.strip() == "started":
                self.started.set()
            else:
                ended = json.loads(line)
                self.sent, self.stamps = ended["sent"], ended["stamps"]

    def join(self) -> None:
        if self._process.wait() != 0:
            sys.exit("the API clients' process failed")
        self._reader.join()

    def tokens_between(self, start: float, end: float) -> int:
        return sum(1 for t in self.stamps if start <= t <= end)


async def stream_clients(base_url: str, model: str, clients: int, max_tokens: int) -> None:
    """The clients' process: says `started` once every client streams, and prints when
    the requests were sent and the stamps of all content chunks as one JSON line at the
    end."""
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    streaming: set[int] = set()
    stamps: list[float] = []

    async def one(index: int) -> None:
        stream = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": API_PROMPTS[index % len(API_PROMPTS)]}],
            temperature=0, max_tokens=max_tokens, stream=True,
        )  # fmt: skip
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                if index not in streaming:
                    streaming.add(index)
                    if len(streaming) == clients:
                        print("started", flush=True)
                stamps.append(time.perf_counter())

    sent = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(clients)))
    await client.close()
    print(json.dumps({"sent": sent, "stamps": stamps}), flush=True)


def write_documents(folder: Path, count: int) -> None:
    """Documents of about 250 words each, every one on its own topic."""
    for n in range(count):
        topic = TOPICS[n % len(TOPICS)]
        sentences = [
            f"Part {n}, note {i}: {topic} matter to the town in ways people rarely notice, "
            f"and record {i} of the archive describes how {topic} changed the harbour."
            for i in range(10)
        ]
        (folder / f"doc{n:02d}.txt").write_text(" ".join(sentences) + "\n")


def start_job(engine: Engine, documents: Path, output: Path) -> int:
    from app.summaries.summary_job import SummarySettings

    engine.progress = []
    return engine.worker.summarize(documents, output, SummarySettings(max_words=60, force=True))


def measure(args: argparse.Namespace) -> dict[str, float]:
    """Every figure of one round, in this process, on the tree `app` is imported from."""
    engine = Engine(args.threads, args.clients)
    figures: dict[str, float] = {}
    try:
        engine.gui_reply(8)  # warm-up
        alone = engine.gui_reply(args.max_tokens)
        figures |= {"gui alone tok/s": alone.rate, "gui alone gap ms": alone.median_gap_ms}

        api = ApiLoad(engine, args.clients, args.max_tokens)
        api.join()
        # from the requests, not the first chunk: an engine that evaluates every prompt
        # before any client's first token would otherwise leave its prompts out
        figures["api alone tok/s"] = len(api.stamps) / (api.stamps[-1] - api.sent)

        api = ApiLoad(engine, args.clients, args.max_tokens * 4)
        api.started.wait(600)
        beside_api = engine.gui_reply(args.max_tokens)
        start, end = beside_api.window
        api.join()  # the clients' stamps come back when they end
        others = api.tokens_between(start, end) / (end - start)
        figures |= {
            "gui+api: gui tok/s": beside_api.rate,
            "gui+api: gui gap ms": beside_api.median_gap_ms,
            "gui+api: all tok/s": beside_api.rate + others,
        }

        with tempfile.TemporaryDirectory() as scratch:
            documents = Path(scratch, "docs")
            documents.mkdir()
            write_documents(documents, args.documents)
            job = start_job(engine, documents, Path(scratch, "alone"))
            outcome = engine.wait(job)
            total = engine.progress[-1][1] if engine.progress else 0
            figures["job alone tok/s"] = total / outcome.outcome.seconds  # type: ignore[attr-defined]

            job = start_job(engine, documents, Path(scratch, "beside"))
            while not engine.progress:
                time.sleep(0.01)  # the job reports once its documents are read
            beside_job = engine.gui_reply(args.max_tokens)
            start, end = beside_job.window
            job_rate = (engine.job_tokens_at(end) - engine.job_tokens_at(start)) / (end - start)
            engine.worker.cancel(job)
            engine.wait(job)
        figures |= {
            "gui+job: gui tok/s": beside_job.rate,
            "gui+job: gui gap ms": beside_job.median_gap_ms,
            "gui+job: all tok/s": beside_job.rate + job_rate,
        }
    finally:
        engine.close()
    return figures


def run_tree(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    """One round in a fresh process importing `tree`'s code (this file's measure)."""
    command = [
        sys.executable, __file__, "--measure", "--threads", str(args.threads),
        "--clients", str(args.clients), "--documents", str(args.documents),
        "--max-tokens", str(args.max_tokens),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"the run in {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        baseline = Path(scratch, "baseline")
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(baseline),
             args.against], check=True,
        )  # fmt: skip
        try:
            rounds: dict[str, list[dict[str, float]]] = {"baseline": [], "this tree": []}
            for _ in range(args.rounds):
                rounds["baseline"].append(run_tree(baseline, args))
                rounds["this tree"].append(run_tree(ROOT, args))
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)],
                check=False,
            )  # fmt: skip
    medians = {
        tree: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for tree, runs in rounds.items()
    }
    before, after = medians["baseline"], medians["this tree"]
    print(f"{args.clients} API clients, {args.documents} documents, {args.rounds} rounds, "
          f"medians; baseline {args.against}")  # fmt: skip
    print(f"{'':24s} {'baseline':>10s} {'this tree':>10s} {'ratio':>7s}")
    for key in after:
        print(f"{key:24s} {before[key]:10.1f} {after[key]:10.1f} {after[key] / before[key]:7.2f}x")
    for name, streams in (("gui+api", args.clients + 1), ("gui+job", None)):
        gap = after[f"{name}: gui gap ms"] / after["gui alone gap ms"]
        mean = after["gui alone tok/s"] / after[f"{name}: gui tok/s"]  # the mean gap's ratio
        share = f"; fair share {after[f'{name}: all tok/s'] / streams:.1f}" if streams else ""
        print(
            f"{name}: all tok/s {after[f'{name}: all tok/s'] / before[f'{name}: all tok/s']:.2f}x "
            f"the baseline's; the GUI's time between tokens {gap:.2f}x alone (median), "
            f"{mean:.2f}x (mean); GUI {after[f'{name}: gui tok/s']:.1f} tok/s{share}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default=THREE_CONTEXTS, help="the baseline's git revision")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--documents", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--clients-of", help=argparse.SUPPRESS)  # the clients' process
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.clients_of:
        asyncio.run(stream_clients(args.clients_of, args.model, args.clients, args.max_tokens))
    elif args.measure:
        print(json.dumps(measure(args)))
    else:
        compare(args)


if __name__ == "__main__":
    main()
