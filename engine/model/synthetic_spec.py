"""What a synthetic model is: its architecture and hyper-parameters (engine.model.synthetic)."""

from __future__ import annotations

from dataclasses import dataclass

import gguf

TEXT_ARCHES = {
    "llama": gguf.MODEL_ARCH.LLAMA,
    "qwen3": gguf.MODEL_ARCH.QWEN3,
    "qwen3moe": gguf.MODEL_ARCH.QWEN3MOE,
    "gemma3": gguf.MODEL_ARCH.GEMMA3,
}
# Language models that only make sense behind a vision projector: Qwen2-VL and Qwen2.5-VL's
# (llama.cpp names both "qwen2vl"), whose M-RoPE takes a (t, y, x) position per image token.
VISION_ARCHES = {"qwen2vl": gguf.MODEL_ARCH.QWEN2VL}
ARCHES = {**TEXT_ARCHES, **VISION_ARCHES}
SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(TEXT_ARCHES)
VISION_LM_ARCHITECTURES: tuple[str, ...] = tuple(VISION_ARCHES)
DIRECT_QUANTS = ("F32", "F16", "Q8_0", "Q4_0", "Q4_1")

FILE_TYPES = {
    "F32": gguf.LlamaFileType.ALL_F32,
    "F16": gguf.LlamaFileType.MOSTLY_F16,
    "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
    "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
}
# Typical released values; they change nothing about speed.
ROPE_FREQ_BASE = {
    "llama": 500_000.0,
    "qwen3": 1_000_000.0,
    "qwen3moe": 1_000_000.0,
    "qwen2vl": 1_000_000.0,
}
QK_NORM_ARCHES = ("qwen3", "qwen3moe", "gemma3")
QKV_BIAS_ARCHES = ("qwen2vl",)  # Qwen2's attention has q/k/v biases
GEMMA3_ROPE_BASE = (1_000_000.0, 10_000.0)  # global layers, sliding-window layers
RMS_EPS = 1e-6


@dataclass(frozen=True)
class SyntheticSpec:
    """Hyper-parameters of a synthetic model; defaults make a tiny, fast one."""

    architecture: str  # one of SUPPORTED_ARCHITECTURES
    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int | None = None  # default n_embd // n_head
    n_ff: int = 128  # dense FFN width
    n_expert: int = 4  # MoE only
    n_expert_used: int = 2
    n_ff_expert: int = 64
    context_length: int = 2048
    sliding_window: int = 512  # gemma3 only
    tied_output: bool = False  # no output.weight; head shares token_embd (gemma3 always ties)
    seed: int = 0
    # None: the default model's tokenizer (49152 tokens). A number: no tokenizer at all
    # (llama.cpp's "none" vocabulary) and that many token ids - what profiler micro-models
    # use, so that the embedding and output head stay negligible next to the blocks.
    vocab_size: int | None = None
    # Special (control) tokens appended to the copied tokenizer, as a VLM's tokenizer adds its
    # image markers (mtmd looks some up as single tokens). Needs the tokenizer (vocab_size None).
    extra_tokens: tuple[str, ...] = ()
    # A chat template in place of the default model's (a reasoning model's, say).
    chat_template: str | None = None

    def __post_init__(self) -> None:
        if self.architecture not in ARCHES:
            raise ValueError(
                f"unknown architecture {self.architecture!r}; supported: {', '.join(ARCHES)}"
            )
        if self.n_layer < 1:
            raise ValueError(f"n_layer must be at least 1, not {self.n_layer}")
        if self.n_head_kv < 1 or self.n_head % self.n_head_kv:
            raise ValueError(
                f"n_head {self.n_head} is not a multiple of n_head_kv {self.n_head_kv}"
            )
        if self.is_moe and not 0 < self.n_expert_used <= self.n_expert:
            raise ValueError(f"n_expert_used must be in 1..{self.n_expert}")
        if self.extra_tokens and self.vocab_size is not None:
            raise ValueError("extra_tokens need the copied tokenizer; vocab_size must be None")
        if len(set(self.extra_tokens)) != len(self.extra_tokens):
            raise ValueError(f"extra_tokens repeat a token: {self.extra_tokens}")
        if self.architecture == "qwen2vl" and self.head_size % 2:
            raise ValueError(f"M-RoPE rotates pairs: head size {self.head_size} must be even")

    @property
    def head_size(self) -> int:
        return self.head_dim if self.head_dim is not None else self.n_embd // self.n_head

    @property
    def is_moe(self) -> bool:
        return self.architecture == "qwen3moe"

    @property
    def ties_output(self) -> bool:
        return self.tied_output or self.architecture == "gemma3"

    @property
    def model_name(self) -> str:
        name = f"synthetic-{self.architecture}-{self.n_layer}L-{self.n_embd}d"
        return f"{name}-{self.n_expert}x{self.n_ff_expert}e" if self.is_moe else name
