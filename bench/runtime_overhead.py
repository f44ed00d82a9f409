"""What our runtime costs on top of llama.cpp: ShardChat's chat path vs plain llama-cpp-python.

Both sides load the same GGUF with identical llama.cpp parameters, get the
same prompt tokens from a clean cache, and decode greedily for the same
number of new tokens. Runs alternate (plain, ours, plain, ours, ...) so that
noise from this shared machine lands on both; medians are compared as ratios.

    .venv/bin/python bench/runtime_overhead.py [--rounds 5] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

from engine.cancel import CancelToken
from engine.chat import ChatSession
from engine.chat_template import ChatMessage
from engine.default_model import default_model_path
from engine.model_params import LoadParams, make_llama_kwargs
from engine.runtime import LoadedModel, load_model
from engine.sampling import GREEDY

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
    reply = ChatSession(model).reply(
        QUESTION, GREEDY.with_changes(max_tokens=max_tokens), CancelToken(), lambda _piece: None
    )
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
    args = parser.parse_args()

    params = LoadParams(args.model, n_ctx=2048, n_threads=args.threads)
    ours = load_model(params)
    plain = llama_cpp.Llama(**{**make_llama_kwargs(params), "verbose": False})
    prompt = ours.chat_template.render([ChatMessage("user", QUESTION)])
    n_prompt = len(ours.tokenize_prompt(prompt))
    if n_prompt != len(plain.tokenize(prompt.text.encode(), special=True)):
        raise SystemExit("the two sides would see different prompt tokens; not comparable")
    # warm both up once (page in the weights, size the buffers)
    run_plain(plain, prompt.text, n_prompt, 8)
    run_ours(ours, 8)

    plain_runs: list[Run] = []
    our_runs: list[Run] = []
    for _ in range(args.rounds):
        plain_runs.append(run_plain(plain, prompt.text, n_prompt, args.max_tokens))
        our_runs.append(run_ours(ours, args.max_tokens))

    report(args, params, n_prompt, plain_runs, our_runs)
    return 0


def report(
    args: argparse.Namespace, params: LoadParams, n_prompt: int, plain: list[Run], ours: list[Run]
) -> None:
    kwargs = make_llama_kwargs(params)
    print(
        f"runtime_overhead: {Path(args.model).name}, n_ctx {kwargs['n_ctx']}, "
        f"threads {kwargs['n_threads']}, n_batch {kwargs['n_batch']}, prompt {n_prompt} tokens, "
        f"up to {args.max_tokens} new tokens, {args.rounds} interleaved rounds, medians"
    )
    print(f"{'':22}{'prompt tok/s':>14}{'decode tok/s':>14}{'TTFT ms':>10}{'new tokens':>12}")
    for name, runs in (("llama-cpp-python", plain), ("shardchat runtime", ours)):
        print(
            f"{name:22}{median(runs, 'prompt_tps'):>14.1f}{median(runs, 'decode_tps'):>14.1f}"
            f"{1000 * median(runs, 'ttft_s'):>10.1f}{median(runs, 'generated_tokens'):>12.0f}"
        )
    prompt_ratio = median(ours, "prompt_tps") / median(plain, "prompt_tps")
    decode_ratio = median(ours, "decode_tps") / median(plain, "decode_tps")
    print(f"{'ratio (ours / plain)':22}{prompt_ratio:>14.3f}{decode_ratio:>14.3f}")
    verdict = "meets" if decode_ratio >= DECODE_TARGET else "BELOW"
    print(f"decode ratio {decode_ratio:.3f} {verdict} the target of {DECODE_TARGET}")


if __name__ == "__main__":
    sys.exit(main())
