"""The one context's KV layout, measured: one pool every sequence shares, or a stream each.

Both layouts run the same work side by side in one call, on the default model:
- "decode": the conversation and 8 other streams, all decoding (short prompts);
- "mixed": the conversation decoding while 2 streams feed 600-token prompts;
each printed as aggregate tokens/s, the conversation's median and longest time
between tokens, and how many of the 9 streams gave their solo run's tokens.

    .venv/bin/python bench/kv_layout.py [--threads 2] [--rounds 2]
    .venv/bin/python bench/kv_layout.py --serving 16 [--rounds 2]

--serving N measures what `shardchat serve --parallel N` runs instead: N API
streams and no conversation, two waves of N questions of up to 64 tokens in
the sequences the first wave left (as clients that ask again), in the context
that shape gets, in each layout; it prints the wall time and the median step
that carries all N streams decoding.

Last run (2026-12-03, quiet 2-core machine, before the step budget saved up for whole
steps): unified 69.7 / 67.7 tok/s in 10,240 cells, a stream each 61.6 / 58.4 in 20,480;
9 of 9 streams gave their solo tokens with a stream each, 0 of 9 unified.
"""

from __future__ import annotations

import argparse
import statistics
import time

from engine.generation.decode_step import DecodeStep
from engine.generation.sampling import GREEDY
from engine.generation.scheduler import CONVERSATION
from engine.generation.stream import Stream, StreamRequest
from engine.llama.load_params import LoadParams
from engine.model.chat_message import ChatMessage
from engine.model.default_model import default_model_path
from engine.runtime.loaded_model import LoadedModel, load_model

N_CTX = 2048
OTHERS = 8
REPLY = GREEDY.with_changes(max_tokens=48)
QUESTIONS = [
    "Name three colours of the sea.",
    "What do bakers need to make bread?",
    "Tell me about trains in one sentence.",
    "Why is the sky blue?",
    "Give me a word that rhymes with cat.",
    "What is two plus two?",
    "Describe a forest in autumn.",
    "Which planet is closest to the sun?",
    "How do birds fly?",
]


def _tokens(model: LoadedModel, text: str) -> list[int]:
    return model.tokenize_prompt(model.chat_template.render([ChatMessage("user", text)]))


def _run(model: LoadedModel, prompts: list[list[int]]) -> tuple[list[Stream], list[float], float]:
    """Stream 0 in the conversation's sequence, the rest in the parallel ones; the
    conversation's gaps between tokens and the wall time."""
    scheduler = model.scheduler
    streams = [
        scheduler.admit(StreamRequest.of_tokens(p, REPLY, reuse_cache=False), seq, 0)
        for seq, p in enumerate(prompts)
    ]
    gaps: list[float] = []
    last = None
    started = time.perf_counter()
    while not all(s.done for s in streams):
        before = len(streams[CONVERSATION].generated)
        scheduler.step()
        now = time.perf_counter()
        if len(streams[CONVERSATION].generated) > before:
            if last is not None and not streams[CONVERSATION].done:
                gaps.append(now - last)
            last = now
    return streams, gaps, time.perf_counter() - started


def _solo(model: LoadedModel, prompt: list[int]) -> list[int]:
    streams, _gaps, _seconds = _run(model, [prompt])
    return streams[0].generated


def measure(unified: bool, threads: int) -> dict[str, str]:
    params = LoadParams(
        str(default_model_path()), n_ctx=N_CTX, n_threads=threads, n_parallel=OTHERS,
        n_ctx_shared=OTHERS * N_CTX // 2, kv_unified=unified,
    )  # fmt: skip
    model = load_model(params)
    try:
        prompts = [_tokens(model, q) for q in QUESTIONS]
        alone = [_solo(model, p) for p in prompts]
        _streams, solo_gaps, _s = _run(model, prompts[:1])
        streams, gaps, seconds = _run(model, prompts)
        same = sum(s.generated == a for s, a in zip(streams, alone, strict=True))
        long = _tokens(model, " ".join(QUESTIONS * 8))[:600]
        _m, mixed_gaps, _ms = _run(model, [prompts[0], long, long[::-1]])
        made = sum(len(s.generated) for s in streams)
        return {
            "layout": "unified pool" if unified else "stream each",
            "cells": str(params.total_cells),
            "decode tok/s": f"{made / seconds:.1f}",
            "chat gap solo ms": f"{1e3 * statistics.median(solo_gaps):.1f}",
            "chat gap decode ms": f"{1e3 * statistics.median(gaps):.1f}",
            "chat gap mixed ms (max)": (
                f"{1e3 * statistics.median(mixed_gaps):.1f} ({1e3 * max(mixed_gaps):.0f})"
            ),
            "same as solo": f"{same}/{len(streams)}",
        }
    finally:
        model.close()


def measure_serving(unified: bool, threads: int, n: int) -> dict[str, str]:
    """N streams alone, as an API server's clients, in the shape `serve --parallel N` loads."""
    from app.model_lifecycle.load_planning import ContextShape

    shape = ContextShape.for_server(n, 1024)
    params = LoadParams(
        str(default_model_path()), n_ctx=N_CTX, n_threads=threads, n_threads_batch=threads,
        n_parallel=shape.n_parallel, n_ctx_shared=shape.shared_cells, kv_unified=unified,
    )  # fmt: skip
    model = load_model(params)
    steps: list[DecodeStep] = []
    model.scheduler.observers.append(steps.append)
    reply = GREEDY.with_changes(max_tokens=64, stop_loops=False)
    try:
        started = time.perf_counter()
        for wave in range(2):
            questions = [
                f"{QUESTIONS[i % len(QUESTIONS)]} (question {wave * n + i})" for i in range(n)
            ]
            streams = [
                model.scheduler.admit(StreamRequest.of_tokens(_tokens(model, q), reply), seq, 0)
                for seq, q in enumerate(questions, start=1)
            ]
            while not all(s.done for s in streams):
                model.scheduler.step()
        seconds = time.perf_counter() - started
    finally:
        model.close()
    full = [s.seconds for s in steps if s.n_tokens == n and s.n_prompt_tokens == 0]
    return {
        "layout": "unified pool" if unified else "stream each",
        "cells": str(params.total_cells),
        "wall s": f"{seconds:.2f}",
        f"{n}-stream step ms": f"{1e3 * statistics.median(full):.1f}" if full else "-",
        "tokens": str(sum(s.n_tokens - s.n_prompt_tokens for s in steps)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--serving", type=int, default=0, help="N API streams alone instead")
    args = parser.parse_args()
    rows = [
        measure_serving(unified, args.threads, args.serving)
        if args.serving
        else measure(unified, args.threads)
        for _ in range(args.rounds)
        for unified in (True, False)
    ]
    keys = list(rows[0])
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(row[k] for k in keys))


if __name__ == "__main__":
    main()
