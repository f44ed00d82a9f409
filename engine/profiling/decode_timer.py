"""Timing llama_decode directly, with no Python generation loop in the way.

The profiler times micro-models with it and the cost-model benchmark times
real models with it, so predicted and measured figures come from the same
kind of call: one `llama_decode` of n tokens at a given position, with
logits requested for a given number of them.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import llama_cpp

from engine.llama import backends
from engine.llama import log_capture as llama_log

_backend_ready = False


def _init_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        llama_log.install()
        backends.start_ggml()
        llama_cpp.llama_backend_init()
        _backend_ready = True


class DecodeTimer:
    """One model and context, owned by the caller's thread; close() frees them."""

    def __init__(
        self,
        model_path: Path,
        n_ctx: int,
        n_batch: int,
        threads: int,
        use_extra_bufts: bool = True,
        n_gpu_layers: int = 0,
        use_mmap: bool = True,
        stream_to_gpu: bool = False,
        devices: Sequence[int] | None = None,
    ) -> None:
        """`stream_to_gpu`: let llama.cpp run ops on host weights on the GPU (op offload).

        Off otherwise, so that CPU figures are the CPU's: on a GPU build llama.cpp would
        stream a CPU block's weights to the GPU for every batch of 32 tokens or more.
        `devices`: the ggml devices offloaded layers go to (a lent computer's), instead of
        every GPU.
        """
        _init_backend()
        model_params = llama_cpp.llama_model_default_params()
        model_params.use_extra_bufts = use_extra_bufts
        model_params.n_gpu_layers = n_gpu_layers
        # Without mmap, a GPU build keeps host-side weights in pinned (page-locked) memory.
        model_params.use_mmap = use_mmap
        device_list = None  # alive until the load returns: llama.cpp reads it during the load
        if devices is not None:
            device_list = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
            model_params.devices = ctypes.addressof(device_list)
        self._model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), model_params)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load {model_path}")
        context_params = llama_cpp.llama_context_default_params()
        context_params.n_ctx = n_ctx
        context_params.n_batch = n_batch
        context_params.n_ubatch = n_batch
        context_params.n_threads = threads
        context_params.n_threads_batch = threads
        context_params.op_offload = stream_to_gpu or n_gpu_layers > 0
        self._ctx = llama_cpp.llama_init_from_model(self._model, context_params)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise RuntimeError(f"llama.cpp could not create a context for {model_path}")
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self._model))
        self.n_batch = n_batch

    def set_threads(self, threads: int) -> None:
        llama_cpp.llama_set_n_threads(self._ctx, threads, threads)

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self._memory, True)

    def decode(self, n_tokens: int, n_past: int = 0, n_outputs: int = 1) -> float:
        """Seconds of one llama_decode of n_tokens at n_past.., logits for the last n_outputs.

        A GPU backend computes the graph asynchronously: llama_decode returns once the
        work is queued, so the clock stops only after llama_synchronize (a no-op on the
        CPU, where decode itself computes).
        """
        self._fill_batch(n_tokens, n_past, n_outputs)
        started = time.perf_counter()
        status = llama_cpp.llama_decode(self._ctx, self._batch)
        llama_cpp.llama_synchronize(self._ctx)
        elapsed = time.perf_counter() - started
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")
        return elapsed

    def time_step(self, n_tokens: int, n_past: int, n_outputs: int, repeats: int) -> float:
        """Median seconds of a step of n_tokens after n_past cached tokens, from the same state."""
        samples = []
        for _ in range(repeats):
            llama_cpp.llama_memory_seq_rm(self._memory, 0, n_past, -1)
            samples.append(self.decode(n_tokens, n_past, n_outputs))
        return statistics.median(samples)

    def prefill(self, n_tokens: int) -> None:
        """Fill the cache with n_tokens tokens (in n_batch chunks) so later steps see a context."""
        self.clear()
        for start in range(0, n_tokens, self.n_batch):
            self.decode(min(self.n_batch, n_tokens - start), start, 1)

    def close(self) -> None:
        if self._ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            llama_cpp.llama_model_free(self._model)
            self._ctx = None

    def __enter__(self) -> DecodeTimer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _fill_batch(self, n_tokens: int, n_past: int, n_outputs: int) -> None:
        if n_tokens > self.n_batch:
            raise ValueError(f"{n_tokens} tokens exceed the batch size {self.n_batch}")
        batch = self._batch
        batch.n_tokens = n_tokens
        first_output = n_tokens - n_outputs
        for i in range(n_tokens):
            batch.token[i] = (7 * (n_past + i) + 3) % self._n_vocab
            batch.pos[i] = n_past + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i >= first_output
