"""`shardchat --selftest`: does this installation work? For installers and support.

Loads the embedded default model (wholly on the GPU llama.cpp would use, where
its backends found one: the model is 100 MB), answers one short prompt greedily
and prints the backends loaded, where llama.cpp put the model's buffers (its own
log lines), the answer and the timings. It needs no display and no Qt, so it
runs the same on a headless server, in an installer's post-install check
and on a support call. Exit 0 means the model loaded and answered; any
failure prints one line (the details go to the log file when it could be
opened) and exits 1.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

log = logging.getLogger(__name__)

PROMPT = "What is the capital of France? Answer in one word."
N_CTX = 512
MAX_TOKENS = 16
ALL_LAYERS = 999  # n_gpu_layers: every block and the output layer
EXIT_OK, EXIT_FAILED = 0, 1


def run_selftest(verbose: bool = False, out: TextIO | None = None) -> int:
    """Load the default model, answer PROMPT, print the answer and timings; the exit code."""
    out = out or sys.stdout
    started = time.perf_counter()
    try:
        _log_to_file(verbose)
        from app.screen_text.units import speed_text
        from engine.generation.sampling import SamplingSettings
        from engine.llama.backends import start_ggml
        from engine.llama.device_buffers import llama_log_lines, parse_buffer_lines
        from engine.llama.ggml_devices import list_devices, offload_devices
        from engine.llama.load_params import LoadParams
        from engine.model.default_model import default_model_path
        from engine.runtime.chat import ChatSession  # llama.cpp loads here, inside the try
        from engine.runtime.loaded_model import load_model

        path = default_model_path()
        print(f"selftest: model {path}", file=out, flush=True)
        report = start_ggml()
        gpus = offload_devices(list_devices())
        print(f"selftest: CPU variant: {report.cpu_variant or 'built in'}", file=out)
        if gpus:
            print(f"selftest: device: {gpus[0].name} ({gpus[0].description})", file=out)
        else:
            print(f"selftest: device: CPU (no GPU: {report.why_no_gpu()})", file=out)
        params = LoadParams(str(path), n_ctx=N_CTX, n_gpu_layers=ALL_LAYERS if gpus else 0)
        with llama_log_lines() as lines:
            model = load_model(params)
        print(f"selftest: buffers: {parse_buffer_lines(lines).describe()}", file=out, flush=True)
        loaded = time.perf_counter()
        try:
            settings = SamplingSettings(temperature=0.0, max_tokens=MAX_TOKENS)
            reply = ChatSession(model).reply(PROMPT, settings)
        finally:
            model.close()
        answer = " ".join(reply.text.split())
        if not answer:
            raise RuntimeError("the model gave an empty answer")
    except Exception as exc:
        log.exception("selftest failed")
        print(f"selftest FAILED: {type(exc).__name__}: {_one_line(exc)}", file=out, flush=True)
        return EXIT_FAILED
    done = time.perf_counter()
    print(f"selftest: prompt: {PROMPT}", file=out)
    print(f"selftest: answer: {answer}", file=out)
    speed = speed_text(reply.stats.decode_tokens_per_s, "tokens/s")
    print(
        f"selftest ok: load {loaded - started:.2f} s, reply {done - loaded:.2f} s "
        f"({reply.stats.generated_tokens} tokens, {speed}), "
        f"total {done - started:.2f} s",
        file=out,
        flush=True,
    )
    return EXIT_OK


def _log_to_file(verbose: bool) -> None:
    """llama.cpp's chatter goes to the log file; a log folder we cannot write is no failure."""
    from app.logging_setup import configure_logging

    try:
        configure_logging(verbose=verbose)
    except OSError as exc:
        logging.getLogger().addHandler(logging.NullHandler())
        print(f"selftest: no log file ({_one_line(exc)})", file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or "no message"
