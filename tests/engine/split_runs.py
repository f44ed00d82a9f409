"""What a child process runs for tests/engine/test_machine_split.py: a model loaded on a
split across this machine and lent computers (llama.cpp's RPC client aborts the process
that uses a server that dies, so these never run in the test's own)."""

from __future__ import annotations

import os

from engine.generation.sampling import SamplingSettings
from engine.llama.device_buffers import llama_log_lines, parse_buffer_lines
from engine.llama.load_params import LoadParams
from engine.planning.machine_split import MachineSplit
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import load_model

PROMPT = "Write a long story about a dragon who learns to bake bread."
GREEDY = SamplingSettings(temperature=0.0, max_tokens=40)


def greedy_reply(
    model_path: str, split: MachineSplit | None, replying: str | None = None, max_tokens: int = 40
) -> tuple[str, int, dict[str, dict[str, int]]]:
    """The greedy reply, its token count and the buffers llama.cpp allocated, loading on
    `split` (None: this machine alone). `replying`: a file made once the first piece of
    the reply is out, for a test that kills a server mid-reply."""
    params = LoadParams(model_path, n_ctx=512, n_threads=1, n_parallel=0, n_ctx_shared=0)
    if split is not None:
        params = split.load_params(params)
    with llama_log_lines() as lines:
        model = load_model(params)

    def mark(_piece: str) -> None:
        if replying is not None and not os.path.exists(replying):
            with open(replying, "w", encoding="utf-8") as file:
                file.write(str(os.getpid()))

    try:
        reply = ChatSession(model).reply(
            PROMPT, GREEDY.with_changes(max_tokens=max_tokens), on_text=mark
        )
    finally:
        model.close()
    return reply.text, reply.stats.generated_tokens, parse_buffer_lines(lines).by_buffer
