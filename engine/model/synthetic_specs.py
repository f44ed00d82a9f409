"""Synthetic model specs that tests, benchmarks and the engine share, each written once.

Real models' shapes come as their config.json files give them (shape-true: written shape-only,
a plan sees a real model's tensors); variants of one model are named for what they change.
Small specs make files a software GPU (lavapipe) computes in seconds.
"""

from __future__ import annotations

from dataclasses import replace

from engine.model.synthetic_spec import SyntheticSpec

# --- real models' shapes ---

# Qwen3-30B-A3B (MoE, 128 experts, 8 used, untied head) with its 151,936 token ids and no
# tokenizer.
QWEN3_30B_A3B = SyntheticSpec(
    "qwen3moe", n_layer=48, n_embd=2048, n_head=32, n_head_kv=4, head_dim=128, n_ff=6144,
    n_expert=128, n_expert_used=8, n_ff_expert=768, vocab_size=151936, context_length=40960,
)  # fmt: skip
# Qwen3-30B-A3B with the default model's tokenizer padded to 151,936 tokens: a hub file's
# header as large as the real model's (tests/local_hub).
QWEN3_30B_A3B_FULL_TOKENIZER = replace(QWEN3_30B_A3B, vocab_size=None, tokenizer_size=151_936)
# Qwen3-30B-A3B's blocks with the default model's own 49,152-token tokenizer (a runnable file).
QWEN3_30B_A3B_SMALL_TOKENIZER = replace(QWEN3_30B_A3B, vocab_size=None)
# Qwen3-235B-A22B (MoE, 128 experts, 8 used) with its 151,936 token ids.
QWEN3_235B_A22B = SyntheticSpec(
    "qwen3moe", n_layer=94, n_embd=4096, n_head=64, n_head_kv=4, head_dim=128, n_ff=12288,
    n_expert=128, n_expert_used=8, n_ff_expert=1536, vocab_size=151936, context_length=40960,
)  # fmt: skip
# Qwen3-32B (dense).
QWEN3_32B = SyntheticSpec(
    "qwen3", n_layer=64, n_embd=5120, n_head=64, n_head_kv=8, head_dim=128, n_ff=25600,
    vocab_size=151936, context_length=40960,
)  # fmt: skip
# Llama-3-8B (dense, 128,256 token ids) with its 131,072-token context.
LLAMA_3_8B = SyntheticSpec(
    "llama", n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, n_ff=14336, vocab_size=128256,
    context_length=131072,
)  # fmt: skip
# Llama-3-8B with the synthetic default 2,048-token context: the dense 8B of the planner tests.
LLAMA_3_8B_CTX_2K = replace(LLAMA_3_8B, context_length=2048)
# Llama-2-7B (dense, no grouped-query attention).
LLAMA_2_7B = SyntheticSpec(
    "llama", n_layer=32, n_embd=4096, n_head=32, n_head_kv=32, n_ff=11008, vocab_size=32000,
    context_length=4096,
)  # fmt: skip
# Qwen2.5-VL-7B's language model in llama blocks, for shape-only files beside
# engine.vision.projector's QWEN25_VL_7B projector.
QWEN25_VL_7B_TEXT = SyntheticSpec(
    "llama", n_layer=28, n_embd=3584, n_head=28, n_head_kv=4, n_ff=18944, vocab_size=152064,
    context_length=128000,
)  # fmt: skip

# --- small models a software GPU computes in seconds ---

# Dense, 12 layers: big enough that 64 and 128 MiB budgets hold part of it.
SMALL_DENSE = SyntheticSpec(
    "llama", n_layer=12, n_embd=768, n_head=12, n_head_kv=4, n_ff=2048, vocab_size=4096,
    context_length=4096,
)  # fmt: skip
# MoE, 8 layers of 8 experts (2 used): big enough that 64 and 128 MiB budgets hold part of it.
SMALL_MOE = SyntheticSpec(
    "qwen3moe", n_layer=8, n_embd=512, n_head=8, n_head_kv=4, n_ff=1024, n_expert=8,
    n_expert_used=2, n_ff_expert=512, vocab_size=4096, context_length=4096,
)  # fmt: skip
