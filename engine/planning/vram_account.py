"""How much device memory a placement needs besides its weights: compute buffers and margin.

The planner fills VRAM up to the budget minus these, so an estimate that is
too small overruns a real GPU's memory (the out-of-memory failure users know
from other apps) and one that is too large wastes VRAM they paid for. The
formulas follow what llama.cpp allocates when it reserves its worst-case graph
(llama_context's graph reserve); tests/gpu checks them against the device
buffers llama.cpp really allocates on a Vulkan device.
"""

from __future__ import annotations

from collections.abc import Collection

from engine.llama.load_params import CONTEXT_GRANULE
from engine.model.inventory import ModelInventory, SubLayer, SubLayerKind
from engine.planning.plan import PlanRequest

MIB = 1024 * 1024
F32 = 4
MIN_MARGIN_BYTES = 128 * MIB
MARGIN_SHARE = 0.05


SOFTWARE_DEVICE_MARGIN_BYTES = 8 * MIB
_SOFTWARE_DEVICES = ("llvmpipe", "lavapipe", "swiftshader")


def margin_floor_for(device_name: str) -> int:
    """The least margin a device needs.

    A real GPU's driver, the CUDA context or Vulkan's allocator take memory that
    llama.cpp's buffers do not show (a few hundred MiB under CUDA); a software
    Vulkan device (Mesa's lavapipe) allocates from system RAM and needs only the
    allocator's rounding.
    """
    return SOFTWARE_DEVICE_MARGIN_BYTES if is_software_device(device_name) else MIN_MARGIN_BYTES


def is_software_device(device_name: str) -> bool:
    """A GPU API device that computes on the CPU (Mesa's lavapipe, SwiftShader)."""
    name = device_name.lower()
    return any(software in name for software in _SOFTWARE_DEVICES)


def margin_bytes(budget_bytes: int, floor: int = MIN_MARGIN_BYTES) -> int:
    """The safety margin kept free of a budget (driver and allocator slack)."""
    return max(floor, int(MARGIN_SHARE * budget_bytes))


def compute_bytes(
    inventory: ModelInventory,
    request: PlanRequest,
    ubatch: int,
    flash_attn: bool = False,
    streamed: Collection[SubLayer] = (),
    prefetch_slots: int = 0,
) -> int:
    """The device compute buffer llama.cpp reserves for its worst-case graph of one ubatch.

    llama.cpp reserves a graph of n_ubatch tokens against a full cache, every token
    asking for logits, and ggml's allocator reuses memory between ops, so the buffer
    is the largest set of f32 tensors alive at once, and every tensor in it grows with
    the ubatch. That is one of three phases: attention, the feed-forward part (gate, up
    and their product), or the output (logits of the whole ubatch: n_ubatch x n_vocab
    x 4 bytes, 0.5 GiB for a 262k vocabulary at ubatch 512). The attention mask
    (n_kv x n_ubatch) stays alive until the last block's attention: f32 without flash
    attention, its f16 copy with it (the f32 one stays in host memory). Without flash
    attention the n_kv x n_ubatch score matrix of every head is the largest tensor of
    all at long contexts (2 GiB for 64 heads at 16K context and ubatch 512); flash
    attention never materialises it. Checked against the buffers llama.cpp reserves on
    a Vulkan device in tests/gpu (flash attention on and off, ubatch 64 to 512).

    `streamed` are the host weights the worst-case graph runs on the device (its
    n_ubatch reaches the op-offload boundary): the scheduler copies each into the
    compute buffer, beside that phase's activations (see `_copy_bytes`). With
    `prefetch_slots` the scheduler stages them instead in that many slots of the largest
    streamed tensor, a buffer of their own that llama.cpp counts in its compute buffer
    (`staging_bytes`).
    """
    width = max(inventory.n_embd or 0, 1)
    cells = _padded_cells(request.n_ctx) + _padded_cells(request.shared_cells)
    mask = cells // 2 if flash_attn else cells
    scores = 0 if flash_attn else (inventory.n_head or 1) * cells
    kv_width = inventory.kv_bytes_per_token // max(2 * 2 * max(len(inventory.blocks), 1), 1)
    attention = scores + mask + 3 * width + 2 * kv_width
    feed_forward = _ffn_width(inventory) + mask
    output = (inventory.n_vocab or 0) + 2 * width
    staged = staging_bytes(inventory, streamed, prefetch_slots)
    block_copy, head_copy = _copy_bytes(inventory, () if staged else streamed)
    return staged + max(
        F32 * ubatch * max(attention, feed_forward) + block_copy,
        F32 * ubatch * output + head_copy,
    )


def staging_bytes(
    inventory: ModelInventory, streamed: Collection[SubLayer], prefetch_slots: int
) -> int:
    """The prefetch staging buffer: every streamed weight is a split of its own, uploaded
    whole into a slot, so a slot holds the largest (checked against the patch's own
    "prefetch staging buffer" line on lavapipe in tests/gpu). The token embedding is
    looked up on the CPU and never streams, unless it is also the (tied) output head."""
    if prefetch_slots < 2:
        return 0
    slots = [s.slot_bytes for s in streamed if runs_on_device(inventory, s)]
    return prefetch_slots * max(slots, default=0)


def runs_on_device(inventory: ModelInventory, sub: SubLayer) -> bool:
    """Whether a streamed sub-layer runs on the GPU (and so takes a staging slot)."""
    return (
        sub.block is not None
        or sub.kind is SubLayerKind.OUTPUT_HEAD
        or (sub.kind is SubLayerKind.TOKEN_EMBEDDING and inventory.tied_output)
    )


def _copy_bytes(inventory: ModelInventory, streamed: Collection[SubLayer]) -> tuple[int, int]:
    """Device copies of streamed weights alive at once: a block's, and the output head's.

    Measured on lavapipe, a block streamed whole adds its attention and its feed-forward
    weights, of an expert bank gate and up (down replaces them): an upper bound where
    attention stays resident, exact for experts and within 0.8 MiB for a dense block
    streamed whole. The head's copy sits beside the logits.
    """
    by_block: dict[int, int] = {}
    head = 0
    for sub in streamed:
        if sub.kind is SubLayerKind.OUTPUT_HEAD or (
            sub.kind is SubLayerKind.TOKEN_EMBEDDING and inventory.tied_output
        ):
            head = max(head, sub.n_bytes)
        elif sub.block is not None:
            share = 2 / 3 if sub.kind is SubLayerKind.ROUTED_EXPERTS else 1.0
            by_block[sub.block] = by_block.get(sub.block, 0) + int(share * sub.n_bytes)
    return max(by_block.values(), default=0), head


def _padded_cells(n_ctx: int) -> int:
    return -(-n_ctx // CONTEXT_GRANULE) * CONTEXT_GRANULE


def _ffn_width(inventory: ModelInventory) -> int:
    """f32 values per token the feed-forward part holds at once: gate, up and their product
    with the block's input and output (MoE: of each active expert, plus the experts'
    outputs and the router's scores)."""
    width = max(inventory.n_embd or 0, 1)
    widest = 0
    for block in inventory.blocks:
        dense = block.sublayer(SubLayerKind.DENSE_FFN)
        experts = block.sublayer(SubLayerKind.ROUTED_EXPERTS)
        shared = block.sublayer(SubLayerKind.SHARED_EXPERTS)
        ffn = dense.n_params // width + 2 * width if dense else 0  # 3 matrices of n_ff x n_embd
        if experts and inventory.expert_count:
            used = inventory.expert_used_count
            per_expert = experts.n_params // (3 * width * inventory.expert_count)
            ffn = max(ffn, 3 * per_expert * used + used * width + 2 * inventory.expert_count)
        if shared:
            ffn += shared.n_params // width
        widest = max(widest, ffn)
    return widest


def fixed_vram(
    inventory: ModelInventory,
    request: PlanRequest,
    ubatch: int,
    margin_floor: int = MIN_MARGIN_BYTES,
    flash_attn: bool = False,
) -> dict[str, int]:
    """Compute buffers for one ubatch (with or without flash attention), and a safety margin."""
    return {
        "compute": compute_bytes(inventory, request, ubatch, flash_attn),
        "margin": margin_bytes(request.vram_budget_bytes, margin_floor),
    }
