"""The one loadable-backend build against the portable single-library build it replaced.

Same model (the embedded default), same threads, same batch sizes, the same
llama.cpp release; only the build differs: today's wheel loads the CPU
variant that scores highest for this CPU (engine.llama.backends), the old one
was compiled once for AVX2/FMA/F16C/BMI2. Each build runs in its own
interpreter (a process holds one libggml), alternating round by round so that
a noisy neighbour slows both alike; each round measures prompt processing
(one 512-token llama_decode) and decoding (64 one-token steps) several times
and keeps the best. Printed: tokens/s of each build per round and the median
ratio new/old.

    make bench-build            # builds the old portable wheel into .venv-portable once
    .venv/bin/python bench/backend_build.py [--rounds 5] [--old .venv-portable/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT_TOKENS = 512
DECODE_TOKENS = 64
THREADS = 2


def measure(model: str, repeats: int) -> dict[str, object]:
    """In the worker process: best prompt and decode tokens/s of `repeats` tries."""
    sys.path.insert(0, str(ROOT))
    import llama_cpp

    from engine.llama.backends import start_ggml

    report = start_ggml()  # loads the CPU variant in a loadable-backend build; no-op otherwise
    quiet = llama_cpp.llama_log_callback(lambda *_: None)  # kept: llama.cpp calls it later
    llama_cpp.llama_log_set(quiet, None)
    model_params = llama_cpp.llama_model_default_params()
    loaded = llama_cpp.llama_model_load_from_file(model.encode(), model_params)
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 1024, PROMPT_TOKENS, PROMPT_TOKENS
    params.n_threads = params.n_threads_batch = THREADS
    context = llama_cpp.llama_init_from_model(loaded, params)
    vocab = llama_cpp.llama_model_get_vocab(loaded)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    tokens = (llama_cpp.llama_token * PROMPT_TOKENS)(
        *[(i * 7919) % n_vocab for i in range(PROMPT_TOKENS)]
    )
    memory = llama_cpp.llama_get_memory(context)

    def prompt() -> float:
        llama_cpp.llama_memory_clear(memory, True)
        started = time.perf_counter()
        assert (
            llama_cpp.llama_decode(context, llama_cpp.llama_batch_get_one(tokens, PROMPT_TOKENS))
            == 0
        )
        return PROMPT_TOKENS / (time.perf_counter() - started)

    def decode() -> float:
        llama_cpp.llama_memory_clear(memory, True)
        assert llama_cpp.llama_decode(context, llama_cpp.llama_batch_get_one(tokens, 64)) == 0
        one = (llama_cpp.llama_token * 1)()
        started = time.perf_counter()
        for i in range(DECODE_TOKENS):
            one[0] = (i * 31) % n_vocab
            assert llama_cpp.llama_decode(context, llama_cpp.llama_batch_get_one(one, 1)) == 0
        return DECODE_TOKENS / (time.perf_counter() - started)

    prompt(), decode()  # warm-up: first-touch of the weights, thread start
    result = {
        "prompt": max(prompt() for _ in range(repeats)),
        "decode": max(decode() for _ in range(repeats)),
        "variant": report.cpu_variant or "single library",
    }
    llama_cpp.llama_free(context)
    llama_cpp.llama_model_free(loaded)
    return result


def run_worker(python: str, model: str, repeats: int) -> dict[str, object]:
    command = [python, __file__, "--worker", "--model", model, "--repeats", str(repeats)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{python} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new", default=str(ROOT / ".venv" / "bin" / "python"))
    parser.add_argument("--old", default=str(ROOT / ".venv-portable" / "bin" / "python"))
    parser.add_argument("--model", default="")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args.model, args.repeats)))
        return 0
    if not Path(args.old).exists():
        raise SystemExit(f"{args.old} is missing: run `make bench-build` first")
    model = args.model or _default_model()
    print(f"load: {os.getloadavg()[0]:.2f} (1 min); model {Path(model).name}; {THREADS} threads")
    ratios: dict[str, list[float]] = {"prompt": [], "decode": []}
    for round_ in range(1, args.rounds + 1):
        order = [("new", args.new), ("old", args.old)]
        if round_ % 2 == 0:
            order.reverse()
        got = {name: run_worker(python, model, args.repeats) for name, python in order}
        new, old = got["new"], got["old"]
        for kind in ratios:
            ratios[kind].append(float(new[kind]) / float(old[kind]))  # type: ignore[arg-type]
        print(
            f"round {round_}: new ({new['variant']}) pp{PROMPT_TOKENS} {new['prompt']:.1f} "
            f"tg{DECODE_TOKENS} {new['decode']:.1f} | old ({old['variant']}) "
            f"pp{PROMPT_TOKENS} {old['prompt']:.1f} tg{DECODE_TOKENS} {old['decode']:.1f} tokens/s"
        )
    for kind, values in ratios.items():
        print(
            f"{kind}: new/old median {statistics.median(values):.3f} "
            f"(rounds {', '.join(f'{v:.3f}' for v in values)})"
        )
    return 0


def _default_model() -> str:
    sys.path.insert(0, str(ROOT))
    from engine.model.default_model import default_model_path

    return str(default_model_path())


if __name__ == "__main__":
    sys.exit(main())
