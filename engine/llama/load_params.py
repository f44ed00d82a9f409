"""The llama.cpp parameters a model is loaded with, explicit and printable.

Every load states its context size, batch sizes, threads, GPU layers and
flash attention, so a plan (engine.planning.execution) becomes exactly this
value and the logs show what llama.cpp was asked to do.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import llama_cpp
import psutil

from engine.known_fields import known_fields
from engine.llama.prefetch import check_slots

DEFAULT_N_CTX = 4096
CONTEXT_GRANULE = 256  # llama.cpp pads every context to a multiple of this
DEFAULT_PARALLEL = 4  # sequences beside the conversation: API clients, a job's documents
DEFAULT_SHARED_CELLS = 8192  # the KV cells those sequences share, twice the default window

KV_LAYOUT = "unified"
"""How the one context's KV cache is laid out: one pool of cells that every sequence
shares (llama.cpp's kv_unified), not a stream of equal size per sequence.

The conversation keeps the window the user chose and the other sequences (API
clients, a summary job's documents) share what is left, each admitted while the
pool has room for its prompt and reply; per-sequence streams would give every
sequence the conversation's window, multiplying the cache by the number of
sequences. Measured with the default model on 2 cores (bench/kv_layout.py): see
the README's layout section for the figures behind the choice.

A headless server (`shardchat serve`) has no conversation whose window the others
would multiply: there each slot gets a stream of its own (kv_unified off), as
llama-server's slots do. In the pool, a step's attention for each token passes
over every cell the pool uses and masks the other sequences' cells out; with 16
clients that cost llama-server 24% more of ggml's compute per token than its own
per-slot streams, and ShardChat 7% (docs/measurements.md, "Where the API's CPU
goes"). With a stream each, its replies are token for token llama-server's.
"""

FLASH_ATTENTION = True
"""Flash attention's default for every load: on.

Measured here on the CPU (default model, 2 cores, a 459-token prompt): flash
attention evaluates the prompt 16% faster and decodes 5% faster, and batch jobs
gain more (16 sequences decode 1.4x one, against 1.0x without). On a GPU it frees
the attention-score buffer of the device compute buffer (n_head x n_ctx x n_ubatch
f32, 2 GiB for a 64-head model at 16K context and ubatch 512), which the VRAM
account models (engine.planning.vram_account) and the planner chooses with the
rest of a plan; a plan's load parameters carry its choice.
"""


MAX_PARALLEL = 62  # llama.cpp's 64 sequences, less the conversation and the prefix holder


def padded_cells(n_ctx: int) -> int:
    """llama.cpp pads context sizes to its granule; what it will allocate for `n_ctx`."""
    return -(-max(n_ctx, 0) // CONTEXT_GRANULE) * CONTEXT_GRANULE


def physical_cores() -> int:
    """Physical cores: llama.cpp's decode does not gain from hyper-threads."""
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


@dataclass(frozen=True)
class LoadParams:
    """What `load_model` passes to llama.cpp; None threads mean the physical core count."""

    model_path: str
    n_ctx: int = DEFAULT_N_CTX
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: int | None = None
    n_threads_batch: int | None = None
    n_gpu_layers: int = 0
    use_mmap: bool = True
    seed: int = llama_cpp.LLAMA_DEFAULT_SEED  # random per load; greedy decoding ignores it
    # (regex, buffer type) pairs placing tensors, e.g. the plan's resident set in VRAM
    tensor_overrides: tuple[tuple[str, str], ...] = ()
    # llama.cpp streams host weights to the GPU from this batch size on (None: its default)
    op_offload_min_batch: int | None = None
    # False: ops on host weights never run on the GPU, whatever their batch (a plan that
    # never streams; without it a GPU build still reserves device compute buffers for them)
    op_offload: bool = True
    # staging slots through which prompt steps upload streamed weights ahead of the compute
    # that needs them (engine.llama.prefetch); 0: each is copied when its split starts
    prefetch_slots: int = 0
    # which GPU (llama.cpp's device index: discrete GPUs first); -1: none, CPU only.
    # Any other than 0 loads in llama.cpp's single-GPU mode, where main_gpu takes effect
    main_gpu: int = 0
    # flash attention (exact): the plan's choice; FLASH_ATTENTION says why it is on by default
    flash_attn: bool = FLASH_ATTENTION
    # the one context's other sequences (API clients, a job's documents) and the KV cells
    # they share beside the conversation's n_ctx (KV_LAYOUT says why one shared pool)
    n_parallel: int = DEFAULT_PARALLEL
    n_ctx_shared: int = DEFAULT_SHARED_CELLS
    kv_unified: bool = True  # False: a stream per sequence (a headless server, KV_LAYOUT)
    # lent computers' RPC servers (host:port, probed first: engine.remote.rpc_probe) whose
    # devices take the last n_gpu_layers layers, in this order, each the share tensor_split
    # gives it (engine.planning.machine_split); only ever in a process that may die of them
    rpc_servers: tuple[str, ...] = ()
    tensor_split: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.n_ctx < 16:
            raise ValueError("n_ctx must be at least 16 tokens")
        if self.n_batch < 1 or self.n_ubatch < 1:
            raise ValueError("n_batch and n_ubatch must be positive")
        for name in ("n_threads", "n_threads_batch"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive")
        check_slots(self.prefetch_slots)
        if self.main_gpu < -1:
            raise ValueError("main_gpu must be a GPU index, or -1 for none")
        if not 0 <= self.n_parallel <= MAX_PARALLEL or self.n_ctx_shared < 0:
            raise ValueError(f"n_parallel must be 0 to {MAX_PARALLEL}, n_ctx_shared >= 0")
        if self.n_batch < self.n_parallel + 1:  # a step carries a token for every sequence
            raise ValueError(
                f"n_batch ({self.n_batch}) must hold a token for each of the conversation's and "
                f"the {self.n_parallel} parallel sequences"
            )

    @property
    def n_sequences(self) -> int:
        """The context's sequences: the conversation, the parallel ones, and one that holds
        a batch job's shared prompt opening."""
        return self.n_parallel + 2

    @property
    def conversation_cells(self) -> int:
        return padded_cells(self.n_ctx)

    @property
    def total_cells(self) -> int:
        """The context's KV cells: the conversation's window plus the shared pool (one
        conversation-sized stream per sequence in the per-sequence layout)."""
        if self.kv_unified:
            return self.conversation_cells + padded_cells(self.n_ctx_shared)
        return self.conversation_cells * self.n_sequences

    def with_changes(self, **changes: Any) -> LoadParams:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoadParams:
        known = known_fields(cls, data)
        known["tensor_overrides"] = tuple(tuple(p) for p in known.get("tensor_overrides", ()))
        return cls(**known)

    @property
    def name(self) -> str:
        return Path(self.model_path).name


def make_llama_kwargs(params: LoadParams) -> dict[str, Any]:
    """Keyword arguments for `llama_cpp.Llama`, with thread defaults resolved."""
    threads = params.n_threads or physical_cores()
    kwargs = {
        "model_path": str(params.model_path),
        # the one context's cells: the conversation's window and the shared pool, asked
        # for as llama.cpp will allocate them (sequences: engine.llama.context_shape)
        "n_ctx": params.total_cells,
        "n_batch": params.n_batch,
        "n_ubatch": min(params.n_ubatch, params.n_batch),
        "n_threads": threads,
        "n_threads_batch": params.n_threads_batch or threads,
        "n_gpu_layers": params.n_gpu_layers,
        "use_mmap": params.use_mmap,
        "op_offload": params.op_offload,
        "seed": params.seed,
        "main_gpu": params.main_gpu,
        # every context of the model (batch contexts copy it) attends the same way, so the
        # same prompt gives the same tokens in a chat turn and in a batch job
        "flash_attn": params.flash_attn,
        # verbose=False would make llama-cpp-python point file descriptors 1 and 2 at
        # /dev/null while loading, silencing every thread of the process; its
        # own Python-level chatter is captured by the runtime instead.
        "verbose": True,
    }
    if params.tensor_split:
        kwargs["tensor_split"] = list(params.tensor_split)
    if params.main_gpu != 0:
        # llama.cpp reads main_gpu only in single-GPU mode (split_mode NONE): there it keeps
        # that one device, or none for -1; the default layer split spreads over every GPU
        kwargs["split_mode"] = llama_cpp.LLAMA_SPLIT_MODE_NONE
    return kwargs
