"""What our runtime costs on top of llama.cpp: ShardChat's chat path vs plain llama-cpp-python.

Both sides load the same GGUF with identical llama.cpp parameters, get the
same prompt tokens from a clean cache, and decode greedily for the same
number of new tokens. Runs alternate (plain, ours, plain, ours, ...) so that
noise from this shared machine lands on both; medians are compared as ratios.
The planned side needs this machine's profile: where none is stored, a fast one is
measured first (bench_profile), and stored.

    .venv/bin/python bench/runtime_overhead.py [--rounds 5] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
from bench_profile import MEASURE_MODES, profile_for_bench

from engine.cancel import CancelToken
from engine.errors import ShardChatError
from engine.generation.sampling import GREEDY
from engine.llama.load_params import LoadParams, make_llama_kwargs
from engine.model.chat_message import ChatMessage
from engine.model.default_model import default_model_path
from engine.model.inventory import read_inventory
from engine.planning.execution import load_params_for
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import LoadedModel, load_model

QUESTION = (
    "Here are my notes from the week. "
    + "We met the suppliers, reviewed the budget, planned the launch and fixed the build. " * 24
    + "Write a long, detailed story that uses all of these events."
)
DECODE_TARGET = 0.97


@dataclass(frozen=True)
class Run:
    prompt_tokens: int
    generated_tokens: int
    ttft_s: float
    decode_s: float

    @property
    def prompt_tps(self) -> float:
        return self.prompt_tokens / self.ttft_s

    @property
    def decode_tps(self) -> float:
        return (self.generated_tokens - 1) / self.decode_s


def run_ours(model: LoadedModel, max_tokens: int) -> Run:
    """One turn through ShardChat's chat session: template, context fit, stream, statistics."""
    settings = GREEDY.with_changes(max_tokens=max_tokens, stop_loops=False)  # as llama-cpp-python
    reply = ChatSession(model).reply(QUESTION, settings, CancelToken(), lambda _piece: None)
    stats = reply.stats
    decode_s = (stats.generated_tokens - 1) / stats.decode_tokens_per_s
    return Run(stats.prompt_tokens, stats.generated_tokens, stats.time_to_first_token_s, decode_s)


def run_plain(llm: llama_cpp.Llama, prompt: str, n_prompt: int, max_tokens: int) -> Run:
    """The same turn as a llama-cpp-python user writes it: create_completion, streamed."""
    llm.reset()  # a clean cache, as our fresh session has
    started = time.perf_counter()
    first = last = None
    count = 0
    stream = llm.create_completion(prompt, max_tokens=max_tokens, temperature=0.0, stream=True)
    for chunk in stream:
        if chunk["choices"][0]["finish_reason"] is not None:
            break  # the closing chunk carries no token
        last = time.perf_counter()
        first = first or last
        count += 1
    assert first is not None and last is not None
    return Run(n_prompt, count, first - started, last - first)


def median(runs: list[Run], field: str) -> float:
    return statistics.median(getattr(r, field) for r in runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(default_model_path()))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--profile-mode", choices=MEASURE_MODES, default="fast",
        help="how to measure this machine when no profile is stored (default: fast)",
    )  # fmt: skip
    args = parser.parse_args()

    planned_load = planned_params(args.model, args.profile_mode)  # may measure: before timing
    params = LoadParams(args.model, n_ctx=2048, n_threads=args.threads)
    ours = load_model(params)
    planned = load_model(planned_load)
    plain = llama_cpp.Llama(**{**make_llama_kwargs(params), "verbose": False})
    defaults = llama_cpp.Llama(model_path=args.model, n_ctx=2048, verbose=False)
    prompt = ours.chat_template.render([ChatMessage("user", QUESTION)])
    n_prompt = len(ours.tokenize_prompt(prompt))
    if n_prompt != len(plain.tokenize(prompt.text.encode(), special=True)):
        raise SystemExit("the two sides would see different prompt tokens; not comparable")
    contenders: dict[str, Callable[[int], Run]] = {
        "llama-cpp-python": lambda n: run_plain(plain, prompt.text, n_prompt, n),
        "shardchat runtime": lambda n: run_ours(ours, n),
        "shardchat --vram 0": lambda n: run_ours(planned, n),
        "llama-cpp-python dflt": lambda n: run_plain(defaults, prompt.text, n_prompt, n),
    }
    for run in contenders.values():  # warm up: page the weights in, size the buffers
        run(8)
    runs: dict[str, list[Run]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, run in contenders.items():
            runs[name].append(run(args.max_tokens))
    report(args, params, planned.params, defaults, n_prompt, runs)
    return 0


def planned_params(model_path: str, profile_mode: str) -> LoadParams:
    """What `shardchat chat --vram 0` loads: the plan on this machine's stored profile."""
    profile = profile_for_bench(profile_mode)
    inventory = read_inventory(model_path)
    plan = make_plan(inventory, profile, PlanRequest(0, n_ctx=2048))
    return load_params_for(plan, inventory, model_path)


def report(
    args: argparse.Namespace,
    params: LoadParams,
    planned: LoadParams,
    defaults: llama_cpp.Llama,
    n_prompt: int,
    runs: dict[str, list[Run]],
) -> None:
    kwargs = make_llama_kwargs(params)
    print(
        f"runtime_overhead: {Path(args.model).name}, n_ctx {kwargs['n_ctx']}, "
        f"threads {kwargs['n_threads']} (planned {planned.n_threads}/{planned.n_threads_batch}, "
        f"llama-cpp-python default {defaults.n_threads}), n_batch {kwargs['n_batch']}, "
        f"prompt {n_prompt} tokens, up to {args.max_tokens} new tokens, {args.rounds} "
        "interleaved rounds, medians"
    )
    print(f"{'':22}{'prompt tok/s':>14}{'decode tok/s':>14}{'TTFT ms':>10}{'new tokens':>12}")
    for name, rows in runs.items():
        print(
            f"{name:22}{median(rows, 'prompt_tps'):>14.1f}{median(rows, 'decode_tps'):>14.1f}"
            f"{1000 * median(rows, 'ttft_s'):>10.1f}{median(rows, 'generated_tokens'):>12.0f}"
        )
    plain = runs["llama-cpp-python"]
    for name in ("shardchat runtime", "shardchat --vram 0"):
        prompt_ratio = median(runs[name], "prompt_tps") / median(plain, "prompt_tps")
        decode_ratio = median(runs[name], "decode_tps") / median(plain, "decode_tps")
        verdict = "meets" if decode_ratio >= DECODE_TARGET else "BELOW"
        print(
            f"{name + ' / plain':28}prompt {prompt_ratio:.3f}  decode {decode_ratio:.3f} "
            f"({verdict} the decode target of {DECODE_TARGET})"
        )
    versus = median(runs["shardchat --vram 0"], "decode_tps")
    versus /= median(runs["llama-cpp-python dflt"], "decode_tps")
    print(f"{'planned / default threads':28}decode {versus:.3f}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ShardChatError as exc:  # a model or profile it cannot use: one line, no traceback
        sys.exit(f"runtime_overhead: {exc}")
