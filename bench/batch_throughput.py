"""Summarising 24 documents one at a time and batched, side by side, with the default model.

The documents (60-600 words of generated prose, a mix of lengths) come from
a seeded generator, so every run summarises the same text. Each document is
summarised with the same instruction, greedily, up to --max-tokens tokens:

- sequential: a BatchGenerator with one sequence and no prefix sharing, one
  document after the other (a lean Python loop over llama_decode; a harder
  baseline than the chat path, which does more per token);
- batched: the planner's parallelism (or --parallel), continuous batching,
  the shared instruction prefix evaluated once.

Runs alternate (sequential, batched, sequential, ...) with --rounds, so load
from other processes on this shared machine lands on both; the best round of
each is reported. Prompt and decode time: a step that carries prompt chunks
and decode tokens together is split by the measured cost of a decode-only
step of that many sequences; everything outside llama_decode (sampling,
detokenising, bookkeeping) counts as decode time.

    .venv/bin/python bench/batch_throughput.py [--parallel 16] [--rounds 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from app.cli.commands.plan_command import load_profile_for_planning
from engine.batch.generator import (
    BatchGenerator,
    BatchRequest,
    BatchResult,
    BatchStats,
    DecodeStep,
)
from engine.errors import BadInputError
from engine.llama.load_params import LoadParams, make_llama_kwargs
from engine.machine.profile import Profile
from engine.model.chat_message import ChatMessage
from engine.model.default_model import default_model_path
from engine.model.inventory import read_inventory
from engine.planning.parallelism import ParallelismChoice, choose_parallelism
from engine.planning.plan import Objective, Plan, PlanRequest
from engine.planning.planner import make_plan
from engine.runtime.loaded_model import LoadedModel, load_model

RECORDED_PROFILE = Path(__file__).resolve().parents[1] / "tests/data/profile-epyc-2core-fast.json"
DECODE_TARGET = 2.2
DOCUMENTS_TARGET = 1.25
SYSTEM = "You are a careful assistant. You write short, faithful summaries of documents."
INSTRUCTION = "Summarise the following document in at most {words} words.\n\n"

TOPICS = {
    "harbour": ["the harbour master", "fishing boats", "the north pier", "a storm warning",
                "the ferry timetable", "crates of mackerel", "the lighthouse keeper"],
    "council": ["the town council", "the new library", "a budget vote", "the mayor",
                "road repairs", "the school board", "a public hearing"],
    "orchard": ["the orchard", "late frost", "apple pickers", "the cider press",
                "a beekeeper", "pruning crews", "the farmers' market"],
    "railway": ["the branch line", "signal engineers", "the night train", "a level crossing",
                "timetable changes", "the old station", "commuters"],
    "museum": ["the museum", "a bronze statue", "the curators", "a school visit",
               "the restoration lab", "a loan from abroad", "the winter exhibition"],
    "clinic": ["the village clinic", "two nurses", "a vaccination day", "the waiting room",
               "an ambulance", "new equipment", "the pharmacist"],
}  # fmt: skip
VERBS = ["reported", "delayed", "welcomed", "questioned", "repaired", "announced",
         "described", "moved", "prepared", "examined", "praised", "postponed", "counted",
         "organised"]  # fmt: skip
LINKS = ["Meanwhile,", "Later that week,", "According to residents,", "In the morning,",
         "By contrast,", "After some debate,", "As expected,", "Unusually,"]  # fmt: skip
DETAILS = ["despite the cold weather", "for the first time in years", "with little warning",
           "after a long delay", "to the surprise of many", "under a tight budget",
           "with help from volunteers", "before the holiday season"]  # fmt: skip


def make_documents(count: int, seed: int, shortest: int = 60, longest: int = 600) -> list[str]:
    """`count` documents of evenly spread lengths (in words), shuffled, from seeded prose."""
    rng = random.Random(seed)
    step = (longest - shortest) / max(count - 1, 1)
    lengths = [round(shortest + i * step) for i in range(count)]
    rng.shuffle(lengths)
    return [_document(rng, words) for words in lengths]


def _document(rng: random.Random, n_words: int) -> str:
    nouns = TOPICS[rng.choice(sorted(TOPICS))]
    words: list[str] = []
    while len(words) < n_words:
        subject, thing = rng.sample(nouns, 2)
        link, verb, detail = rng.choice(LINKS), rng.choice(VERBS), rng.choice(DETAILS)
        sentence = f"{link} {subject} {verb} {thing} {detail}."
        if rng.random() < 0.4:
            sentence += f" It was {rng.randint(2, 90)} days before {rng.choice(nouns)} agreed."
        words += sentence.split()
    return " ".join(words[:n_words]).rstrip(",") + "."


def make_requests(documents: list[str], max_tokens: int, words: int) -> list[BatchRequest]:
    instruction = INSTRUCTION.format(words=words)
    return [
        BatchRequest(
            f"doc{i:02d}",
            (ChatMessage("system", SYSTEM), ChatMessage("user", instruction + text)),
            max_tokens,
        )
        for i, text in enumerate(documents)
    ]


@dataclass
class Run:
    """One pass over all documents: totals, every llama_decode, every result."""

    name: str
    n_parallel: int
    stats: BatchStats
    steps: list[DecodeStep] = field(default_factory=list)
    results: dict[str, BatchResult] = field(default_factory=dict)

    def decode_step_cost(self) -> dict[int, float]:
        """Median seconds of a decode-only llama_decode, by its number of sequences."""
        by_size: dict[int, list[float]] = defaultdict(list)
        for step in self.steps:
            if step.n_prompt_tokens == 0:
                by_size[step.n_tokens].append(step.seconds)
        return {size: statistics.median(times) for size, times in by_size.items()}

    @property
    def prompt_seconds(self) -> float:
        """Prompt work: prompt steps, less what their decode tokens would cost on their own."""
        cost = self.decode_step_cost()
        seconds = 0.0
        for step in self.steps:
            if step.n_prompt_tokens:
                n_decode = step.n_tokens - step.n_prompt_tokens
                seconds += step.seconds - (_nearest(cost, n_decode) if n_decode else 0.0)
        return seconds

    @property
    def decode_seconds(self) -> float:
        return self.stats.wall_seconds - self.prompt_seconds

    @property
    def documents_per_minute(self) -> float:
        return 60.0 * self.stats.n_results / self.stats.wall_seconds

    @property
    def prompt_tokens_per_s(self) -> float:
        return self.stats.prompt_tokens / self.prompt_seconds

    @property
    def generated_tokens_per_s(self) -> float:
        return self.stats.generated_tokens / self.decode_seconds


def _nearest(cost: dict[int, float], size: int) -> float:
    if not cost:
        return 0.0
    return cost[min(cost, key=lambda s: (abs(s - size), s))]


def run_once(
    name: str,
    model: LoadedModel,
    requests: list[BatchRequest],
    n_parallel: int,
    n_ctx: int,
    plan: Plan,
    share_prefix: bool,
) -> Run:
    with BatchGenerator(model, n_parallel, n_ctx, plan=plan, share_prefix=share_prefix) as gen:
        steps: list[DecodeStep] = []
        results: dict[str, BatchResult] = {}
        stats = gen.run(requests, lambda r: results.__setitem__(r.key, r), on_step=steps.append)
    print(f"  {name}: {stats.wall_seconds:.1f} s", file=sys.stderr, flush=True)
    failed = [r for r in results.values() if r.finish_reason == "error"]
    if failed or len(results) != len(requests):
        raise SystemExit(f"{name}: {len(failed)} failed, {len(results)} of {len(requests)} done")
    return Run(name, n_parallel, stats, steps, results)


def planner_choice(
    model_path: str, n_documents: int, n_ctx: int
) -> tuple[Plan, ParallelismChoice, str]:
    try:
        profile, source = load_profile_for_planning(None), "this machine's stored profile"
    except BadInputError:
        profile = Profile.from_json(RECORDED_PROFILE.read_text(encoding="utf-8"))
        source = "the recorded 2-core profile (none stored for this machine)"
    inventory = read_inventory(model_path)
    request = PlanRequest(0, n_ctx=n_ctx, n_parallel=16, objective=Objective.BATCH)
    plan = make_plan(inventory, profile, request)
    return plan, choose_parallelism(plan, profile, inventory, n_documents, n_ctx), source


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(default_model_path()))
    parser.add_argument("--documents", type=int, default=24)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--summary-words", type=int, default=40)
    parser.add_argument("--parallel", type=int, default=None, help="override the planner")
    parser.add_argument("--ctx-per-sequence", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    model = load_model(LoadParams(args.model, n_ctx=512, n_threads=args.threads))
    requests = make_requests(
        make_documents(args.documents, args.seed), args.max_tokens, args.summary_words
    )
    plan, choice, source = planner_choice(args.model, len(requests), args.ctx_per_sequence)
    n_parallel = args.parallel or choice.n_parallel
    warm = requests[:2]  # page the weights in and size the buffers before timing
    run_once("warm-up", model, warm, 2, args.ctx_per_sequence, plan, True)
    rounds: dict[str, list[Run]] = {"sequential": [], "batched": []}
    for _ in range(args.rounds):
        rounds["sequential"].append(
            run_once("sequential", model, requests, 1, args.ctx_per_sequence, plan, False)
        )
        rounds["batched"].append(
            run_once("batched", model, requests, n_parallel, args.ctx_per_sequence, plan, True)
        )
    best = {name: min(runs, key=lambda r: r.stats.wall_seconds) for name, runs in rounds.items()}
    report(args, model, requests, choice, source, n_parallel, best["sequential"], best["batched"])
    return 0


def report(
    args: argparse.Namespace,
    model: LoadedModel,
    requests: list[BatchRequest],
    choice: ParallelismChoice,
    source: str,
    n_parallel: int,
    sequential: Run,
    batched: Run,
) -> None:
    kwargs = make_llama_kwargs(model.params)
    words = [len(r.messages[1].content.split()) for r in requests]
    print(
        f"batch_throughput: {Path(args.model).name}, {len(requests)} documents "
        f"({min(words)}-{max(words)} words incl. instruction, seed {args.seed}), summaries of "
        f"at most {args.max_tokens} tokens, greedy, {kwargs['n_threads']} threads, n_batch "
        f"{kwargs['n_batch']}, {args.ctx_per_sequence} cells per sequence, best of "
        f"{args.rounds} interleaved round(s)"
    )
    chosen = "override" if args.parallel else "planner"
    print(f"parallelism {n_parallel} ({chosen}; planner from {source}: {choice.reason})")
    rows = [
        ("documents/minute", "documents_per_minute", ".2f", DOCUMENTS_TARGET),
        ("prompt tokens/s", "prompt_tokens_per_s", ".1f", None),
        ("generated tokens/s", "generated_tokens_per_s", ".1f", DECODE_TARGET),
    ]
    print(f"{'':24}{'sequential':>12}{'batched':>12}{'ratio':>8}  target")
    for label, attribute, spec, target in rows:
        seq, bat = getattr(sequential, attribute), getattr(batched, attribute)
        ratio = bat / seq
        met = "met" if target is not None and ratio >= target else "NOT met"
        verdict = "" if target is None else f">= {target}: {met}"
        print(f"{label:24}{seq:>12{spec}}{bat:>12{spec}}{ratio:>8.2f}  {verdict}")
    _totals(sequential, batched)
    _llama_level(sequential, batched)
    _agreement(sequential, batched)


def _agreement(sequential: Run, batched: Run) -> None:
    """Greedy replies agree until float rounding (other batch splits) flips a near tie."""
    pairs = [(r.token_ids, batched.results[k].token_ids) for k, r in sequential.results.items()]
    same = sum(a == b for a, b in pairs)
    first_difference = [
        next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        for a, b in pairs
    ]
    print(
        f"summaries identical token for token, batched vs sequential: {same}/{len(pairs)}; "
        f"tokens before the first difference: median {statistics.median(first_difference):.0f}, "
        f"min {min(first_difference)}"
    )


def _totals(sequential: Run, batched: Run) -> None:
    for label, value in (
        ("wall seconds", lambda r: f"{r.stats.wall_seconds:.1f}"),
        ("prompt seconds", lambda r: f"{r.prompt_seconds:.1f}"),
        ("decode seconds", lambda r: f"{r.decode_seconds:.1f}"),
        ("prompt tokens", lambda r: str(r.stats.prompt_tokens)),
        ("  evaluated", lambda r: str(r.stats.evaluated_prompt_tokens)),
        ("  copied from prefix", lambda r: str(r.stats.reused_prompt_tokens)),
        ("generated tokens", lambda r: str(r.stats.generated_tokens)),
        ("llama_decode calls", lambda r: str(r.stats.steps)),
    ):
        print(f"{label:24}{value(sequential):>12}{value(batched):>12}")


def _llama_level(sequential: Run, batched: Run) -> None:
    """Inside llama_decode only: what the kernels deliver at 1 and at n sequences."""
    one = sequential.decode_step_cost().get(1)
    batch_cost = batched.decode_step_cost()
    full = batched.n_parallel if batched.n_parallel in batch_cost else max(batch_cost, default=0)
    if one and full:
        many = full / batch_cost[full]
        print(
            f"llama_decode alone, decode-only steps (median): 1 sequence {1 / one:.1f} tokens/s, "
            f"{full} sequences {many:.1f} tokens/s ({many * one:.2f}x)"
        )
    for run in (sequential, batched):
        inside = sum(s.seconds for s in run.steps)
        outside = run.stats.wall_seconds - inside
        per_token = 1e3 * outside / max(run.stats.generated_tokens, 1)
        prompt_steps = [s for s in run.steps if s.n_prompt_tokens]
        print(
            f"{run.name}: {inside:.1f} s inside llama_decode, {outside:.1f} s outside "
            f"({per_token:.2f} ms per generated token); {len(prompt_steps)} steps carried prompt"
        )


if __name__ == "__main__":
    sys.exit(main())
