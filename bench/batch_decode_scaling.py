"""How much llama_decode itself gains from batching sequences, by context length.

The ceiling for the batched engine's decode speed-up: a decode step carrying
one token for each of N sequences (each in its own KV stream, as the batch
engine runs them), against a step for one sequence, with every sequence's
cache already holding CONTEXT tokens. Only the llama_decode call is timed
(median of --steps); nothing of ours runs in between. Flash attention on (what
the batch engine uses) and off; the KV cache in F16 (ours) and Q8_0.

    .venv/bin/python bench/batch_decode_scaling.py [--contexts 128,600] [--sequences 16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import llama_cpp

import engine.generation.decode_context as batch_context
from engine.generation.decode_context import DecodeContext
from engine.llama.load_params import LoadParams
from engine.model.default_model import default_model_path
from engine.runtime.loaded_model import LoadedModel, load_model

KV_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0}
FLASH = {
    "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}
FILL_CHUNK = 256


@contextmanager
def context_settings(kv_type: int, flash: int) -> Iterator[None]:
    """Batch contexts made inside get these KV and attention settings (the bench's knobs)."""
    original = batch_context._context_params

    def with_settings(*args: object) -> llama_cpp.llama_context_params:
        params = original(*args)  # type: ignore[arg-type]
        params.type_k = params.type_v = kv_type
        params.flash_attn_type = flash
        return params

    batch_context._context_params = with_settings
    try:
        yield
    finally:
        batch_context._context_params = original


def tokens_per_s(model: LoadedModel, n_sequences: int, context: int, steps: int) -> float:
    """Aggregate decode speed of N sequences whose caches hold `context` tokens each."""
    shape = (n_sequences, context + steps + 64)
    with DecodeContext.for_sequences(model.handle, model.params, *shape) as ctx:
        for sequence in range(n_sequences):
            for start in range(0, context, FILL_CHUNK):
                ctx.clear()
                for position in range(start, min(start + FILL_CHUNK, context)):
                    ctx.add(100 + position % 50, position, sequence, False)
                if ctx.decode() != 0:
                    raise RuntimeError("llama_decode failed while filling the cache")
        times = []
        for step in range(steps):
            ctx.clear()
            for sequence in range(n_sequences):
                ctx.add(200 + step, context + step, sequence, True)
            started = time.perf_counter()
            if ctx.decode() != 0:
                raise RuntimeError("llama_decode failed")
            times.append(time.perf_counter() - started)
    return n_sequences / statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", default="128,600")
    parser.add_argument("--sequences", type=int, default=16)
    parser.add_argument("--steps", type=int, default=24)
    args = parser.parse_args()
    model = load_model(LoadParams(str(default_model_path()), n_ctx=512))
    print(
        f"batch_decode_scaling: {model.inventory.name}, {model.params.n_threads or 'default'} "
        f"threads, llama_decode only, median of {args.steps} steps"
    )
    print(f"{'context':>8} {'kv':>5} {'flash':>6} {'1 seq tok/s':>12} "
          f"{f'{args.sequences} seq tok/s':>13} {'ratio':>6}")  # fmt: skip
    for context in (int(c) for c in args.contexts.split(",")):
        for kv, flash in (("f16", "on"), ("f16", "off"), ("q8_0", "on")):
            with context_settings(KV_TYPES[kv], FLASH[flash]):
                one = tokens_per_s(model, 1, context, args.steps)
                many = tokens_per_s(model, args.sequences, context, args.steps)
            print(f"{context:>8} {kv:>5} {flash:>6} {one:>12.1f} {many:>13.1f} {many / one:>6.2f}")
    model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
