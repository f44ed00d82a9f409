"""Streaming chat at 1, 4 and 16 clients: ShardChat's server, llama-server, llama-cpp-python's.

Three OpenAI-compatible servers serve the same GGUF with the same threads,
batch and ubatch (512), flash attention on and the model's own chat template:

- shardchat: `shardchat serve --parallel N --ctx-per-slot C` (continuous batching);
- llama-server: llama.cpp's server built from the source vendored in the same
  llama-cpp-python release, with the same patches and the same loadable CPU
  variants as ShardChat's wheel (`make bench-api` builds it), so both choose and
  run the same kernels on any machine (column `kernels` shows each one's), with
  `-np N -c N*C --no-kv-unified` so each client has a slot of C cells, as ours;
- llama-server-unified (only when asked for): the same with `--kv-unified`, one
  pool of N*C cells that every slot shares, the layout ShardChat's one context
  uses, to tell the layout's cost from the server's (docs/measurements.md, "The KV
  layout at 16 clients");
- llama-cpp-python: its own `python -m llama_cpp.server` from .venv-bench (the
  portable single-library wheel of the same release: its server loads no backend
  modules), n_ctx C; it serves one request at a time. Three of
  its defaults would be unfair and are changed: interrupt_requests (a new request
  cuts the stream being served), logits_all (logits for every prompt token) and a
  repeat penalty of 1.1 (requests ask for 1.0, as the others decode).

Each server is started afresh for every level N (so its slot count matches and
no prompt cache carries over), warmed with one request, then N clients of the
official `openai` package (AsyncOpenAI) each send their share of --requests
distinct questions one after the other: streaming chat completions, temperature 0,
--max-tokens tokens at most. All servers are up at once and take the questions a
block at a time in turn (about 4 questions a block, at least one per client; the
order reversed block by block), and each server's row sums its blocks: this
machine's speed drifts 5-15% over a minute, and whole runs one after the other
(--whole-runs, and --profile) measured the drift as much as the servers. A block
starts its clients together: at 16 clients every block is a burst of 16 requests
(in a whole run only the first is), so a server's handling of bursts counts more.
Aggregate tokens/s is all completion tokens over the level's wall time; TTFT is
the time from sending a request to its first content delta (queueing included:
that is what a client waits). Completion tokens come
from the server's usage (`stream_options.include_usage`); where a server sends
none (llama-cpp-python), a reply cut at the limit counts --max-tokens and any
other is re-tokenised with the model's tokenizer. The table says which.

Every request has a connection of its own (`Connection: close`): a pooled one the
server closes as it is reused fails the request, and there are no retries to hide
that. Column `others` is the CPU that other programs used while a row was timed
(in cores); above 0.2 the row is measured again (--busy-retries) and the quieter
run kept, since on 2 cores a neighbour's load slows any server several fold.

    make bench-api        # builds llama-server and .venv-bench first
    .venv/bin/python bench/api_throughput.py [--levels 1,4,16] [--threads 2] \
        [--rounds 3] [--servers shardchat,llama-server,llama-cpp-python] [--profile] \
        [--json results.json]

--profile adds, per level, each server's CPU per generated token by thread (its
compute threads, its others) and, where perf may sample it, by library
(bench/server_cpu.py): where ShardChat's time goes beside llama-server's.

Last runs (2026-12-07, default model, 2 cores, 2 threads, the zen4 module in both
servers, interleaved, 2 rounds per level, the API loop in SCHED_BATCH), ShardChat
against llama-server, two runs in a row: tokens/s 0.96x and 0.96x at 1 client, 0.93x
and 0.95x at 4, 0.95x and 0.99x at 16; median time to first token 1.09x and 1.08x,
0.87x and 0.91x, 1.09x and 0.93x; replies identical, 32 of 32 at every level. The
rounds' own ratios agree within 0.04. Tables and reading: docs/measurements.md,
"Between two steps".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil
from openai import AsyncOpenAI

from engine.llama.load_params import physical_cores
from engine.model.default_model import default_model_path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_cpu import COLUMNS, CpuSplit, Profiling, ServerCpu, perf_usable  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LLAMA_SERVER = ROOT / ".cache/llama-server/build/bin/llama-server"
BENCH_PYTHON = ROOT / ".venv-bench/bin/python"
SHARDCHAT = Path(sys.executable).parent / "shardchat"
HOST = "127.0.0.1"
BATCH = 512  # n_batch and n_ubatch: what engine.llama.load_params gives our own contexts
SERVERS = ("shardchat", "llama-server", "llama-cpp-python")
PEERS = ("llama-server", "llama-server-unified", "llama-cpp-python")
BUSY_CORES = 0.2  # other programs' load above which a row is flagged
BLOCK_REQUESTS = 4  # questions per block, at least one per client, when servers interleave
WARM_UP = "Say hello in one short sentence."
QUESTIONS = [
    "What causes the seasons on Earth?",
    "How does a refrigerator keep food cold?",
    "Why is the sky blue during the day?",
    "What is the difference between weather and climate?",
    "How do bees make honey?",
    "Why do cats purr?",
    "What is photosynthesis, in simple words?",
    "How does a bicycle stay upright when moving?",
    "What is the tallest mountain in Europe?",
    "Why does bread rise when it is baked?",
    "How do vaccines train the immune system?",
    "What does a compiler do?",
    "Why do leaves change colour in autumn?",
    "How are rainbows formed?",
    "What is the purpose of a central bank?",
    "How does a lighthouse help ships at night?",
    "Why do we have leap years?",
    "What makes a volcano erupt?",
    "How does a microwave oven heat food?",
    "What is the water cycle?",
    "Why is exercise good for the heart?",
    "How do magnets attract iron?",
    "What is a prime number? Give two examples.",
    "Why do onions make people cry?",
    "How does a library organise its books?",
    "What is the difference between a virus and a bacterium?",
    "Why do ships float even though they are made of steel?",
    "How do trains change tracks?",
    "What is inflation in economics?",
    "Why does ice float on water?",
    "How do birds know where to migrate?",
    "What is the role of the kidneys?",
]


class BenchError(Exception):
    """A server that would not start or a request that failed: the run stops, non-zero."""


@dataclass(frozen=True)
class Setup:
    """What every server is given, so the comparison is like for like."""

    model: str
    threads: int
    ctx_per_client: int
    max_tokens: int
    requests: int
    start_timeout: float


@dataclass
class Reply:
    """One streamed completion as a client saw it."""

    ttft_s: float
    usage: int | None  # completion tokens as the server reported them, if it did
    finish_reason: str | None
    text: str
    tokens: int = 0  # from usage, or counted after the level (see TokenCounter)
    counted_by: str = ""  # "usage", "limit" (cut at max_tokens) or "re-tokenised"


@dataclass
class LevelResult:
    """One server at one concurrency level."""

    level: int
    server: str
    wall_s: float
    others_cores: float  # CPU busy outside the server and this script, as cores, while timed
    replies: list[Reply] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    kernels: str = "?"  # the CPU module the server runs (libggml-cpu-<variant>)
    round: int = 0
    cpu: CpuSplit | None = None  # with --profile: where its CPU went while timed

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.replies)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s

    @property
    def median_ttft_ms(self) -> float:
        return 1e3 * statistics.median(r.ttft_s for r in self.replies)

    @property
    def counted_by(self) -> str:
        kinds = sorted({r.counted_by for r in self.replies})
        return "+".join(kinds)


def free_port() -> int:
    """A port nobody listens on now (the OS picks it), for one server start."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def help_text(command: list[str]) -> str:
    """A server's --help, to pass only flags this build has (and say so when one is missing)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BenchError(f"{command[0]}: {error}") from error
    if done.returncode != 0:
        raise BenchError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout + done.stderr


def shardchat_command(setup: Setup, port: int, n: int, flags: str) -> list[str]:
    command = [str(SHARDCHAT), "serve", "--model", setup.model, "--host", HOST]
    command += ["--port", str(port), "--parallel", str(n), "--threads", str(setup.threads)]
    if "--ctx-per-slot" in flags:
        command += ["--ctx-per-slot", str(setup.ctx_per_client)]
    return command


def llama_server_command(setup: Setup, port: int, n: int, flags: str) -> list[str]:
    command = [str(LLAMA_SERVER), "-m", setup.model, "--host", HOST, "--port", str(port)]
    command += ["-np", str(n), "-c", str(n * setup.ctx_per_client), "--no-kv-unified"]
    command += ["-t", str(setup.threads), "-tb", str(setup.threads)]
    command += ["-b", str(BATCH), "-ub", str(BATCH), "-fa", "on", "--jinja"]
    if "--no-webui" in flags:
        command.append("--no-webui")
    return command


def llama_server_unified_command(setup: Setup, port: int, n: int, flags: str) -> list[str]:
    command = llama_server_command(setup, port, n, flags)
    command[command.index("--no-kv-unified")] = "--kv-unified"
    return command


def llama_cpp_python_command(setup: Setup, port: int, n: int, flags: str) -> list[str]:
    """One Llama behind a lock; n does not apply. Two defaults are changed, both to be fair:
    interrupt_requests (on, a new request cuts the stream being served) and logits_all
    (on, logits for every prompt token, which no other server computes)."""
    command = [str(BENCH_PYTHON), "-m", "llama_cpp.server", "--model", setup.model]
    command += ["--host", HOST, "--port", str(port), "--n_ctx", str(setup.ctx_per_client)]
    command += ["--n_batch", str(BATCH), "--n_ubatch", str(BATCH)]
    command += ["--n_threads", str(setup.threads), "--n_threads_batch", str(setup.threads)]
    command += ["--flash_attn", "true", "--interrupt_requests", "false"]
    command += ["--logits_all", "false", "--use_mlock", "false"]
    return command


@dataclass(frozen=True)
class ServerKind:
    """How to check for and start one of the three servers."""

    name: str
    executable: Path
    how_to_get: str
    help_command: list[str]
    build_command: Callable[[Setup, int, int, str], list[str]]
    # sent with every request: where a server's defaults are not plain greedy decoding
    request_extra: dict[str, Any] = field(default_factory=dict)


KINDS = {
    "shardchat": ServerKind(
        "shardchat",
        SHARDCHAT,
        "make (installs .venv)",
        [str(SHARDCHAT), "serve", "--help"],
        shardchat_command,
    ),
    "llama-server": ServerKind(
        "llama-server",
        LLAMA_SERVER,
        "make bench-api (builds it from the vendored llama.cpp)",
        [str(LLAMA_SERVER), "--help"],
        llama_server_command,
    ),
    "llama-server-unified": ServerKind(
        "llama-server-unified",
        LLAMA_SERVER,
        "make bench-api (builds it from the vendored llama.cpp)",
        [str(LLAMA_SERVER), "--help"],
        llama_server_unified_command,
    ),
    "llama-cpp-python": ServerKind(
        "llama-cpp-python",
        BENCH_PYTHON,
        "make bench-api (creates .venv-bench)",
        [str(BENCH_PYTHON), "-m", "llama_cpp.server", "--help"],
        llama_cpp_python_command,
        # its server's default repeat penalty is 1.1 (the others' 1.0): other replies, and
        # a penalty pass over the logits per token
        {"repeat_penalty": 1.0},
    ),
}


def check_servers(names: list[str]) -> dict[str, str]:
    """Each chosen server's --help, failing before any timing when one is missing."""
    flags: dict[str, str] = {}
    for name in names:
        kind = KINDS[name]
        if not kind.executable.exists():
            raise BenchError(f"{name}: {kind.executable} not found; run {kind.how_to_get}")
        flags[name] = help_text(kind.help_command)
    if "shardchat" in flags and "--ctx-per-slot" not in flags["shardchat"]:
        print(
            "WARNING: shardchat serve has no --ctx-per-slot: its per-client context is its own "
            "default, not --ctx-per-client",
            file=sys.stderr,
        )
    if "llama-server" in flags and "--no-webui" not in flags["llama-server"]:
        print("note: this llama-server has no --no-webui; its web UI stays on", file=sys.stderr)
    return flags


def _log_tail(log: IO[str], lines: int = 60) -> str:
    log.flush()
    log.seek(0)
    return "".join(log.readlines()[-lines:])


@contextlib.contextmanager
def running_server(
    name: str, command: list[str], port: int, timeout: float, log_dir: Path
) -> Iterator[tuple[str, IO[str], int]]:
    """A started server, up (GET /v1/models answers 200), stopped on leaving however we leave.

    It runs in a session of its own so that Ctrl-C reaches only this script, which then
    stops the server (SIGTERM to its process group, SIGKILL after 10 s) in `finally`.
    Yields the first model id it lists, its log (stdout and stderr) and its pid.
    """
    with tempfile.NamedTemporaryFile(
        "w+", prefix=f"{name}-", suffix=".log", dir=log_dir, delete=False
    ) as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=ROOT,
        )
        try:
            model_id = _wait_until_up(name, process, port, timeout, log)
            yield model_id, log, process.pid
        finally:
            _stop(process)


def _wait_until_up(
    name: str, process: subprocess.Popen[bytes], port: int, timeout: float, log: IO[str]
) -> str:
    url = f"http://{HOST}:{port}/v1/models"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchError(
                f"{name} exited ({process.returncode}) before serving; its log:\n{_log_tail(log)}"
            )
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    models = json.load(response).get("data") or [{}]
                    return str(models[0].get("id") or "default")
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
            pass
        time.sleep(0.25)
    raise BenchError(f"{name} not serving {url} after {timeout:.0f} s; its log:\n{_log_tail(log)}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(wait)
            return


class TokenCounter:
    """Completion tokens of a reply whose stream carried no usage.

    A reply cut at the limit has exactly max_tokens; any other is re-tokenised with the
    model's own tokenizer (llama_cpp, vocabulary only), which can differ from the tokens
    generated by a token where the text splits differently.
    """

    def __init__(self, model: str, max_tokens: int) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self._llama: Any = None

    def count(self, text: str, finish_reason: str | None) -> tuple[int, str]:
        if finish_reason == "length":
            return self.max_tokens, "limit"
        if self._llama is None:
            import llama_cpp

            from engine.llama.backends import start_ggml

            start_ggml()
            with _quiet_stderr():  # llama.cpp warns about a vocabulary-only context's size
                self._llama = llama_cpp.Llama(self.model, vocab_only=True, verbose=False)
        tokens = self._llama.tokenize(text.encode(), add_bos=False, special=False)
        return len(tokens), "re-tokenised"


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


async def stream_one(
    client: AsyncOpenAI, model_id: str, question: str, setup: Setup, extra: dict[str, Any]
) -> Reply:
    """One streaming chat completion, timed from sending to the first content delta."""
    start = time.perf_counter()
    stream = await client.chat.completions.create(
        model=model_id,
        messages=[{"role": "user", "content": question}],
        stream=True,
        temperature=0,
        max_tokens=setup.max_tokens,
        stream_options={"include_usage": True},
        extra_body=extra or None,
    )
    first: float | None = None
    parts: list[str] = []
    usage: int | None = None
    finish: str | None = None
    async for chunk in stream:
        if chunk.usage is not None and chunk.usage.completion_tokens is not None:
            usage = chunk.usage.completion_tokens
        for choice in chunk.choices:
            if choice.delta is not None and choice.delta.content:
                if first is None:
                    first = time.perf_counter()
                parts.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    if first is None:
        raise BenchError(f"no content streamed for {question!r} (finish reason {finish})")
    return Reply(first - start, usage, finish, "".join(parts))


async def run_level(
    port: int,
    model_id: str,
    n: int,
    setup: Setup,
    server_pid: int,
    extra: dict[str, Any],
    profile: ServerCpu | None = None,
) -> tuple[float, float, list[Reply]]:
    """N clients, each sending its share of the questions in turn (`profile` brackets
    the timed window, the warm-up request left out).

    Returns the wall time, the CPU cores other processes kept busy meanwhile, and the replies.
    """
    per_client = math.ceil(setup.requests / n)
    # A new connection per request: a pooled one that the server closes just as it is reused
    # (llama-server's idle timeout is the client's, 5 s; it can also close after a stream)
    # fails the request, and no retries hide failures here. Loopback connects cost ~0.1 ms.
    client = AsyncOpenAI(
        base_url=f"http://{HOST}:{port}/v1",
        api_key="x",
        max_retries=0,
        timeout=600.0,
        default_headers={"Connection": "close"},
    )
    async with client:
        await stream_one(client, model_id, WARM_UP, setup, extra)

        async def one_client(c: int) -> list[Reply]:
            questions = [
                QUESTIONS[(c * per_client + k) % len(QUESTIONS)] for k in range(per_client)
            ]
            return [await stream_one(client, model_id, q, setup, extra) for q in questions]

        server = psutil.Process(server_pid)
        if profile is not None:
            profile.start()
        cpu_before = _cpu_seconds(server)
        start = time.perf_counter()
        per_client_replies = await asyncio.gather(*(one_client(c) for c in range(n)))
        wall = time.perf_counter() - start
        cpu_after = _cpu_seconds(server)
        if profile is not None:
            profile.stop()
    others = (cpu_after[0] - cpu_before[0]) - (cpu_after[1] - cpu_before[1])
    return wall, max(others, 0.0) / wall, [r for replies in per_client_replies for r in replies]


def cpu_kernels(pid: int) -> str:
    """The CPU variant a running server loaded (`zen4` for libggml-cpu-zen4.so), read from
    its memory maps: both servers must run the same kernels for the ratio to be about the
    servers. `static` where the CPU backend is linked in (no module)."""
    try:
        mapped = {Path(m.path).name for m in psutil.Process(pid).memory_maps()}
    except (psutil.Error, OSError):
        return "?"
    modules = sorted(name for name in mapped if name.startswith("libggml-cpu-"))
    if modules:
        return ",".join(name.removeprefix("libggml-cpu-").split(".so")[0] for name in modules)
    return "static" if any(name.startswith("libggml") for name in mapped) else "?"


def _cpu_seconds(*servers: psutil.Process) -> tuple[float, float]:
    """Busy CPU seconds of the whole machine, and of the servers' processes and this one.

    Their difference is other programs' load: on a shared machine a row measured while
    something else ran is slower than the server is, and the table says so.
    """
    t = psutil.cpu_times()
    busy = sum(t) - t.idle
    for name in ("iowait", "guest", "guest_nice"):  # Linux's guest time is in user already
        busy -= getattr(t, name, 0.0)
    ours = 0.0
    processes = [psutil.Process()]
    for server in servers:
        with contextlib.suppress(psutil.Error):
            processes += [server, *server.children(recursive=True)]
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            ours += times.user + times.system
    return busy, ours


def measure(
    name: str,
    n: int,
    setup: Setup,
    flags: str,
    counter: TokenCounter,
    log_dir: Path,
    profiling: Profiling | None = None,
) -> LevelResult:
    port = free_port()
    command = KINDS[name].build_command(setup, port, n, flags)
    print(f"  level {n}, {name}: {' '.join(command)}", file=sys.stderr, flush=True)
    cpu: CpuSplit | None = None
    with running_server(name, command, port, setup.start_timeout, log_dir) as (model_id, log, pid):
        profile = profiling.of(pid, setup.threads, log_dir) if profiling else None
        try:
            wall, others, replies = asyncio.run(
                run_level(port, model_id, n, setup, pid, KINDS[name].request_extra, profile)
            )
            kernels = cpu_kernels(pid)
            cpu = profile.split() if profile is not None else None
        except BenchError:
            raise
        except Exception as error:  # the client's errors: say which server, show its log
            raise _client_failure(f"{name} at {n} clients", error, log) from error
        finally:
            if profile is not None:
                profile.close()
    count_tokens(replies, counter)
    result = LevelResult(n, name, wall, others, replies, command, kernels, cpu=cpu)
    _say_result(result)
    return result


def count_tokens(replies: list[Reply], counter: TokenCounter) -> None:
    """Each reply's completion tokens, after the clock stopped (loading the tokenizer takes
    a moment)."""
    for reply in replies:
        if reply.usage is not None:
            reply.tokens, reply.counted_by = reply.usage, "usage"
        else:
            reply.tokens, reply.counted_by = counter.count(reply.text, reply.finish_reason)


def _say_result(result: LevelResult) -> None:
    print(
        f"    {result.server}: {result.tokens} tokens in {result.wall_s:.1f} s: "
        f"{result.tokens_per_s:.1f} tok/s, median TTFT {result.median_ttft_ms:.0f} ms, "
        f"other programs {result.others_cores:.2f} cores, CPU kernels {result.kernels}",
        file=sys.stderr,
        flush=True,
    )


def measure_quietest(
    name: str,
    n: int,
    setup: Setup,
    flags: str,
    counter: TokenCounter,
    log_dir: Path,
    retries: int,
    profiling: Profiling | None = None,
) -> LevelResult:
    """`measure`, again while other programs took CPU meanwhile, keeping the quietest run.

    On 2 cores, another process's load slows every server several fold (llama.cpp's
    threads wait on each other), which would make a ratio say more about the neighbours
    than about the servers.
    """
    result = measure(name, n, setup, flags, counter, log_dir, profiling)
    for _ in range(retries):
        if result.others_cores <= BUSY_CORES:
            break
        print("    the machine was busy: measuring again", file=sys.stderr, flush=True)
        again = measure(name, n, setup, flags, counter, log_dir, profiling)
        result = min(result, again, key=lambda r: r.others_cores)
    return result


@dataclass
class Serving:
    """One server up for an interleaved level: where to reach it and what it was told."""

    name: str
    port: int
    model_id: str
    log: IO[str]
    pid: int
    command: list[str]


@dataclass
class BlockRun:
    """One block of questions on one server: its wall time, other programs' CPU seconds
    meanwhile, and the replies."""

    wall_s: float
    others_s: float
    replies: list[Reply]


def question_blocks(n: int, setup: Setup) -> list[list[list[str]]]:
    """The level's questions cut into blocks: block b holds, for each of the n clients,
    the questions it sends one after the other in that block.

    Each client has the same questions as in a whole run (`run_level`), in the same
    order; a block holds about BLOCK_REQUESTS of them, at least one per client.
    """
    per_client = math.ceil(setup.requests / n)
    per_block = max(1, math.ceil(BLOCK_REQUESTS / n))
    mine = [
        [QUESTIONS[(c * per_client + k) % len(QUESTIONS)] for k in range(per_client)]
        for c in range(n)
    ]
    return [[own[k : k + per_block] for own in mine] for k in range(0, per_client, per_block)]


async def run_block(
    serving: Serving, block: list[list[str]], setup: Setup, servers: list[Serving]
) -> BlockRun:
    """One block on one server: its clients at once, each sending its questions in turn.
    The other servers, idle meanwhile, are not counted as other programs."""
    client = AsyncOpenAI(
        base_url=f"http://{HOST}:{serving.port}/v1",
        api_key="x",
        max_retries=0,
        timeout=600.0,
        default_headers={"Connection": "close"},  # see run_level
    )
    extra = KINDS[serving.name].request_extra
    async with client:

        async def one_client(questions: list[str]) -> list[Reply]:
            return [await stream_one(client, serving.model_id, q, setup, extra) for q in questions]

        processes = [psutil.Process(s.pid) for s in servers]
        cpu_before = _cpu_seconds(*processes)
        start = time.perf_counter()
        replies = await asyncio.gather(*(one_client(questions) for questions in block))
        wall = time.perf_counter() - start
        cpu_after = _cpu_seconds(*processes)
    others = (cpu_after[0] - cpu_before[0]) - (cpu_after[1] - cpu_before[1])
    return BlockRun(wall, max(others, 0.0), [r for mine in replies for r in mine])


async def run_interleaved(
    servers: list[Serving], n: int, setup: Setup, retries: int
) -> dict[str, list[BlockRun]]:
    """Every block on every server in turn, the order reversed block by block, so that
    the machine's drift (5-15% between runs minutes apart here) falls on both alike.

    A block during which other programs kept more than BUSY_CORES busy is run again on
    every server (--busy-retries), and the quieter of the tries kept.
    """
    for serving in servers:
        await _named(serving, run_block(serving, [[WARM_UP]], setup, servers))
    runs: dict[str, list[BlockRun]] = {serving.name: [] for serving in servers}
    for b, block in enumerate(question_blocks(n, setup)):
        order = servers if b % 2 == 0 else servers[::-1]
        kept: dict[str, BlockRun] | None = None
        for _ in range(1 + retries):
            tried = {
                serving.name: await _named(serving, run_block(serving, block, setup, servers))
                for serving in order
            }
            if kept is None or _busiest(tried) < _busiest(kept):
                kept = tried
            if _busiest(kept) <= BUSY_CORES:
                break
            print(f"    block {b + 1}: the machine was busy: again", file=sys.stderr, flush=True)
        assert kept is not None
        for name, run in kept.items():
            runs[name].append(run)
    return runs


def _busiest(runs: dict[str, BlockRun]) -> float:
    return max(run.others_s / run.wall_s for run in runs.values())


async def _named(serving: Serving, work: Awaitable[BlockRun]) -> BlockRun:
    """`work`, its failures told with the server's name and log."""
    try:
        return await work
    except BenchError:
        raise
    except Exception as error:
        raise _client_failure(serving.name, error, serving.log) from error


def _client_failure(what: str, error: BaseException, log: IO[str]) -> BenchError:
    """A client's error, told with its chain of causes, which server and that server's log."""
    causes = []
    cause: BaseException | None = error
    while cause is not None:
        causes.append(f"{type(cause).__name__}: {cause}")
        cause = cause.__cause__ or cause.__context__
    return BenchError(f"{what}: {' <- '.join(causes)}\nits log:\n{_log_tail(log)}")


def measure_interleaved(
    names: list[str],
    n: int,
    setup: Setup,
    flags: dict[str, str],
    counter: TokenCounter,
    log_dir: Path,
    retries: int,
) -> list[LevelResult]:
    """Every server up at once, the level's questions run block by block on each in turn:
    each server's row sums its blocks, so both rows are timed over the same minutes."""
    with contextlib.ExitStack() as stack:
        servers: list[Serving] = []
        for name in names:
            port = free_port()
            command = KINDS[name].build_command(setup, port, n, flags[name])
            print(f"  level {n}, {name}: {' '.join(command)}", file=sys.stderr, flush=True)
            up = running_server(name, command, port, setup.start_timeout, log_dir)
            model_id, log, pid = stack.enter_context(up)
            servers.append(Serving(name, port, model_id, log, pid, command))
        runs = asyncio.run(run_interleaved(servers, n, setup, retries))
        kernels = {serving.name: cpu_kernels(serving.pid) for serving in servers}
    results = []
    for serving in servers:
        mine = runs[serving.name]
        wall = sum(run.wall_s for run in mine)
        replies = [reply for run in mine for reply in run.replies]
        count_tokens(replies, counter)
        others = sum(run.others_s for run in mine) / wall
        result = LevelResult(
            n, serving.name, wall, others, replies, serving.command, kernels[serving.name]
        )
        _say_result(result)
        results.append(result)
    return results


def report(results: list[LevelResult], setup: Setup, levels: list[int]) -> dict[str, Any]:
    """The table (each server's medians over the rounds), the ratios (the median of the
    rounds' own ratios, each round's two runs side by side) and how the replies agree;
    returns the same as data for --json."""
    rounds = max(r.round for r in results) + 1
    print(
        f"\napi_throughput: {Path(setup.model).name}, {setup.threads} threads, batch/ubatch "
        f"{BATCH}, flash attention on, {setup.ctx_per_client} cells per client, "
        f"{setup.requests} distinct questions per level, greedy, at most {setup.max_tokens} "
        f"tokens each, streamed; medians of {rounds} round(s)"
    )
    print(
        f"{'clients':>7}  {'server':18}{'tok/s':>8}{'TTFT ms':>9}{'tokens':>8}{'wall s':>8}"
        f"{'others':>8}  {'kernels':12}tokens counted by"
    )
    ratios: list[dict[str, Any]] = []
    for level in levels:
        runs = {
            name: sorted((r for r in results if r.level == level and r.server == name),
                         key=lambda r: r.round)
            for name in dict.fromkeys(r.server for r in results if r.level == level)
        }  # fmt: skip
        for name, mine in runs.items():
            tok = statistics.median(r.tokens_per_s for r in mine)
            ttft = statistics.median(r.median_ttft_ms for r in mine)
            print(
                f"{level:>7}  {name:18}{tok:>8.1f}{ttft:>9.0f}{mine[0].tokens:>8}"
                f"{statistics.median(r.wall_s for r in mine):>8.1f}"
                f"{max(r.others_cores for r in mine):>8.2f}  {mine[0].kernels:12}"
                f"{mine[0].counted_by}"
            )
        ours = runs.get("shardchat")
        for peer in PEERS:
            if ours is None or peer not in runs:
                continue
            pairs = list(zip(ours, runs[peer], strict=True))
            toks = [a.tokens_per_s / b.tokens_per_s for a, b in pairs]
            ttfts = [a.median_ttft_ms / b.median_ttft_ms for a, b in pairs]
            tok, ttft = statistics.median(toks), statistics.median(ttfts)
            ratios.append(
                {"level": level, "peer": peer, "tokens_per_s": tok, "ttft": ttft,
                 "rounds_tokens_per_s": toks, "rounds_ttft": ttfts}
            )  # fmt: skip
            print(
                f"{'':9}shardchat/{peer}: tok/s x{tok:.2f} ({_each(toks)}), "
                f"median TTFT x{ttft:.2f} ({_each(ttfts)})"
            )
        _agreement({name: mine[0] for name, mine in runs.items()})
        _cpu_table(runs)
    print(
        "TTFT: median, from sending to the first content delta. others: CPU cores that other "
        "programs kept busy while a row was timed (the most of any round). Ratios: the median "
        "of the rounds' ratios, each round's in brackets"
    )
    if len({r.kernels for r in results if r.server != "llama-cpp-python"}) > 1:
        print("WARNING: the servers ran different CPU kernels: the ratios compare builds too")
    busy = [r for r in results if r.others_cores > BUSY_CORES]
    if busy:
        rows_text = ", ".join(f"{r.server} at {r.level} (round {r.round + 1})" for r in busy)
        print(f"WARNING: the machine was busy with other work during {rows_text}: rerun when quiet")
    return {
        "setup": asdict(setup),
        "batch": BATCH,
        "rounds": rounds,
        "results": [
            {
                "level": r.level,
                "server": r.server,
                "round": r.round,
                "tokens_per_s": r.tokens_per_s,
                "median_ttft_ms": r.median_ttft_ms,
                "tokens": r.tokens,
                "requests": len(r.replies),
                "wall_s": r.wall_s,
                "others_cores": r.others_cores,
                "tokens_counted_by": r.counted_by,
                "cpu_kernels": r.kernels,
                "cpu_seconds": asdict(r.cpu) if r.cpu is not None else None,
                "command": r.command,
            }
            for r in results
        ],
        "ratios": ratios,
    }


def _cpu_table(runs: dict[str, list[LevelResult]]) -> None:
    """With --profile: each server's CPU per generated token, by thread and by library
    (medians of its rounds), so that the servers' costs stand side by side."""
    profiled = {name: mine for name, mine in runs.items() if all(r.cpu for r in mine)}
    if not profiled:
        return
    sampled = all(r.cpu and r.cpu.libraries for mine in profiled.values() for r in mine)
    columns = ("total", "compute threads", "other threads") + (COLUMNS if sampled else ())
    print(f"{'':9}CPU ms per generated token: " + " | ".join(columns))
    for name, mine in profiled.items():
        values = [_cpu_per_token(mine, column) for column in columns]
        print(f"{'':9}{name:18}" + " | ".join(f"{v:.2f}" for v in values))


def _cpu_per_token(runs: list[LevelResult], column: str) -> float:
    def ms(result: LevelResult) -> float:
        cpu = result.cpu
        assert cpu is not None
        by_thread = {
            "total": cpu.total,
            "compute threads": cpu.compute_threads,
            "other threads": cpu.other_threads,
        }
        seconds = by_thread[column] if column in by_thread else cpu.libraries.get(column, 0.0)
        return 1e3 * seconds / result.tokens

    return statistics.median(ms(r) for r in runs)


def _each(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def _agreement(rows: dict[str, LevelResult]) -> None:
    """Same model, template and greedy sampling: replies should match but for rare near ties."""
    names = list(rows)
    for other in names[1:]:
        pairs = zip(rows[names[0]].replies, rows[other].replies, strict=True)
        same = sum(a.text == b.text for a, b in pairs)
        print(f"{'':9}replies identical, {names[0]} vs {other}: {same}/{len(rows[other].replies)}")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(default_model_path()))
    parser.add_argument("--levels", default="1,4,16", help="concurrent clients, comma-separated")
    parser.add_argument(
        "--servers", default=",".join(SERVERS), help="a subset of " + ", ".join(KINDS)
    )
    parser.add_argument("--threads", type=int, default=physical_cores())
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--ctx-per-client", type=int, default=1024)
    parser.add_argument("--requests", type=int, default=len(QUESTIONS), help="per level")
    parser.add_argument("--start-timeout", type=float, default=180.0, help="seconds per start")
    parser.add_argument(
        "--busy-retries",
        type=int,
        default=1,
        help=f"measure a row again while other programs kept >{BUSY_CORES} cores busy",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="runs of every server per level, alternating which goes first; the ratios are "
        "the medians of each round's (every round starts the servers afresh)",
    )
    parser.add_argument(
        "--whole-runs",
        action="store_true",
        help="time each server's level in one run after the other's (before 2026-12-07 the "
        "only way) instead of all servers up at once, taking blocks of questions in turn",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also split each server's CPU per token by thread and, where perf may sample "
        "it, by library (bench/server_cpu.py)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()
    levels = [int(v) for v in args.levels.split(",") if v.strip()]
    names = [v.strip() for v in args.servers.split(",") if v.strip()]
    unknown = sorted(set(names) - set(KINDS))
    if unknown or not names or not levels or min(levels) < 1 or args.rounds < 1:
        parser.error(
            f"--servers from {', '.join(KINDS)}; --levels and --rounds positive (got {unknown})"
        )
    setup = Setup(
        args.model,
        args.threads,
        args.ctx_per_client,
        args.max_tokens,
        args.requests,
        args.start_timeout,
    )
    signal.signal(signal.SIGTERM, _interrupt)  # stop the servers when killed, as on Ctrl-C
    began = time.perf_counter()
    counter = TokenCounter(args.model, args.max_tokens)
    profiling = Profiling(perf_usable()) if args.profile else None
    whole_runs = args.whole_runs or profiling is not None  # a profile brackets one whole run
    if profiling is not None and not profiling.sample:
        print("note: perf cannot sample here: CPU by thread only", file=sys.stderr)
    try:
        flags = check_servers(names)
        results: list[LevelResult] = []
        with tempfile.TemporaryDirectory(prefix="shardchat-api-bench-") as temp:
            for level in levels:
                for round_ in range(args.rounds):
                    # each round in the other order: neither server always runs first
                    order = names if round_ % 2 == 0 else names[::-1]
                    if whole_runs:
                        timed = [
                            measure_quietest(
                                name,
                                level,
                                setup,
                                flags[name],
                                counter,
                                Path(temp),
                                args.busy_retries,
                                profiling,
                            )
                            for name in order
                        ]
                    else:
                        timed = measure_interleaved(
                            order, level, setup, flags, counter, Path(temp), args.busy_retries
                        )
                    for result in timed:
                        result.round = round_
                    results += timed
    except BenchError as error:
        print(f"api_throughput: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("api_throughput: interrupted; servers stopped", file=sys.stderr)
        return 130
    data = report(results, setup, levels)
    print(f"({time.perf_counter() - began:.0f} s in all, server starts included)")
    if args.json:
        args.json.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
