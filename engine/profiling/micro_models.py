"""The micro-models the profiler times, and how many FLOPs one of their blocks does.

Each measurement compares two models that differ only in block count (1 and
1 + k), so the difference of their step times is the time of k blocks alone:
the embedding, output head and fixed per-call cost cancel out. k is chosen so
the k blocks together are far larger than any CPU cache: a real model's
weights stream from DRAM at every step, and so must the micro-model's, or a
one-token step would look faster than it is. Vocabularies are tiny (no
tokenizer) so the head is negligible anyway, and logits are requested for
every token, so llama.cpp's shortcut that computes only output rows in the
last block does not apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.machine.profile import KernelShape
from engine.model.inventory import BlockInventory, SubLayerKind, read_inventory
from engine.model.synthetic import quantize_model, write_synthetic_model
from engine.model.synthetic_spec import DIRECT_QUANTS, SyntheticSpec

STREAMED_BYTES = 64 * 1024 * 1024  # what the extra blocks must add up to, at least
MIN_EXTRA_LAYERS, MAX_EXTRA_LAYERS = 2, 24
MICRO_VOCAB = 256
LLAMA_QUANT_NAMES = {"Q4_K": "Q4_K_S", "Q5_K": "Q5_K_S", "Q6_K": "Q6_K", "Q3_K": "Q3_K_S"}


@dataclass(frozen=True)
class MicroShape:
    """Widths of a micro-model's block; chosen like a small real model's sub-layers."""

    kernel: KernelShape
    n_embd: int
    n_ff: int
    n_head: int
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_expert: int = 0
    vocab_size: int = MICRO_VOCAB

    def spec(self, n_layer: int) -> SyntheticSpec:
        architecture = "qwen3moe" if self.kernel is KernelShape.MOE else "llama"
        return SyntheticSpec(
            architecture=architecture,
            n_layer=n_layer,
            n_embd=self.n_embd,
            n_head=self.n_head,
            n_head_kv=self.n_head,
            n_ff=self.n_ff,
            n_expert=self.n_expert or 4,
            n_expert_used=self.n_expert_used or 2,
            n_ff_expert=self.n_ff_expert or 64,
            context_length=4096,
            vocab_size=self.vocab_size,
        )


DENSE = MicroShape(KernelShape.DENSE, n_embd=1024, n_ff=2816, n_head=8)
MOE = MicroShape(
    KernelShape.MOE, n_embd=1024, n_ff=2816, n_head=8, n_expert=8, n_expert_used=2, n_ff_expert=768
)
TINY = MicroShape(KernelShape.DENSE, n_embd=64, n_ff=256, n_head=2)  # per-layer fixed costs
WIDE = MicroShape(KernelShape.DENSE, n_embd=2048, n_ff=5632, n_head=16)  # DRAM bandwidth
# An output head as tall as a small real vocabulary, on a block too small to matter.
HEAD = MicroShape(KernelShape.HEAD, n_embd=1024, n_ff=256, n_head=8)
HEAD_VOCAB = 32768
# Real attention heads (8 x 128) with a token FFN: cheap to fill with a long context.
ATTENTION = MicroShape(KernelShape.DENSE, n_embd=1024, n_ff=256, n_head=8)


def micro_model(folder: Path, shape: MicroShape, quant: str, n_layer: int) -> Path:
    """Path of the micro-model, written on first use (atomically, so a crash leaves none)."""
    name = (
        f"{shape.kernel.value}-{shape.n_embd}x{shape.n_ff}-v{shape.vocab_size}-{n_layer}L-{quant}"
    )
    name += ".gguf"
    path = folder / name
    if path.exists():
        return path
    if quant in DIRECT_QUANTS:
        return write_synthetic_model(path, shape.spec(n_layer), quant)
    source = micro_model(folder, shape, "F16", n_layer)
    return quantize_model(source, path, LLAMA_QUANT_NAMES.get(quant, quant))


def model_pair(
    folder: Path, shape: MicroShape, quant: str, streamed_bytes: int = STREAMED_BYTES
) -> tuple[Path, Path, int]:
    """A one-block model, a (1 + k)-block one, and k (k blocks hold `streamed_bytes`)."""
    one = micro_model(folder, shape, quant, 1)
    block, _ = block_of(one)
    extra = -(-streamed_bytes // max(block.n_bytes, 1))
    extra = min(max(extra, MIN_EXTRA_LAYERS), MAX_EXTRA_LAYERS)
    return one, micro_model(folder, shape, quant, 1 + extra), extra


def block_flops_per_token(block: BlockInventory, expert_share: float) -> float:
    """Multiply-adds of one block for one token, counted as 2 FLOPs per weight used.

    Routed experts count only the share a token activates (used / total).
    """
    flops = 0.0
    for sub in block.sublayers:
        share = expert_share if sub.kind is SubLayerKind.ROUTED_EXPERTS else 1.0
        flops += 2.0 * sub.n_params * share
    return flops


def block_of(path: Path) -> tuple[BlockInventory, float]:
    """Block 0 of a micro-model and the share of its routed experts one token uses."""
    inventory = read_inventory(path)
    share = inventory.expert_used_count / inventory.expert_count if inventory.is_moe else 1.0
    return inventory.blocks[0], share
