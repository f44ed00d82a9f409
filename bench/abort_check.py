"""A prompt step's abort check: native (engine.llama.abort_flag) against a Python callback.

llama.cpp calls the abort check after every graph node. A Python callback takes the
GIL for each call; this measures what that costs a prompt step while another thread
of the process runs Python (as the API server's loop or the window does), side by
side in one run: the default model, a 45-token prompt step, --rounds rounds of
--steps steps each way, the two ways alternating, and the ratio of the medians.

    .venv/bin/python bench/abort_check.py [--steps 8] [--rounds 3] [--threads 2]

Last run: see docs/measurements.md, "The abort check without the GIL".
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import llama_cpp

from engine.generation.decode_context import DECODE_OK
from engine.llama.abort_flag import AbortFlag
from engine.llama.load_params import LoadParams
from engine.model.chat_message import ChatMessage
from engine.model.default_model import default_model_path
from engine.runtime.loaded_model import LoadedModel, load_model

PROMPT = "Write a short paragraph about the number seven and where it appears in nature."


class PythonCheck(AbortFlag):
    """The check as it was: a ctypes callback into Python, reading a Python flag."""

    def __init__(self) -> None:
        super().__init__()
        self._python = llama_cpp.ggml_abort_callback(lambda _data: self.raised)

    @property
    def callback(self) -> Any:
        return self._python


def prompt_step_seconds(model: LoadedModel, tokens: list[int], check: AbortFlag) -> float:
    context = model.scheduler.context
    context.clear()
    for position, token in enumerate(tokens):
        context.add(token, position, 1, position == len(tokens) - 1)
    started = time.perf_counter()
    code = context.decode(check)
    seconds = time.perf_counter() - started
    context.forget(1)
    if code != DECODE_OK:
        raise SystemExit(f"llama_decode returned {code}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    model = load_model(
        LoadParams(str(default_model_path()), n_ctx=1024, n_threads=args.threads, n_parallel=1)
    )
    tokens = model.tokenize_prompt(model.chat_template.render([ChatMessage("user", PROMPT)]))
    busy = threading.Event()

    def other_python() -> None:  # another thread of the process, running Python
        count = 0
        while not busy.is_set():
            count += 1

    threading.Thread(target=other_python, daemon=True).start()
    times: dict[str, list[float]] = {"native": [], "python": []}
    try:
        for _ in range(args.rounds):
            for name, make in (("native", AbortFlag), ("python", PythonCheck)):
                for _ in range(args.steps):
                    times[name].append(prompt_step_seconds(model, tokens, make()))
    finally:
        busy.set()
        model.close()
    native, python = (statistics.median(times[k]) for k in ("native", "python"))
    print(f"{len(tokens)}-token prompt step beside a Python thread, {args.threads} threads, "
          f"median of {args.rounds * args.steps}:")  # fmt: skip
    print(f"  native check {1e3 * native:.1f} ms, Python callback {1e3 * python:.1f} ms: "
          f"native x{native / python:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
