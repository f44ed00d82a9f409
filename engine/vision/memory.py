"""The vision encoder's device memory, and the language model's while it evaluates an image.

Memory formulas (bytes; n = patches the encoder sees in one pass, d = vision
width, f = FFN width, H = heads, p = patch size), from llama.cpp's clip graph
(tools/mtmd) and ggml-alloc, which reuses a tensor's memory once its last
consumer ran, so the compute buffer is the live set of the worst moment:

- weights: the projector's tensor bytes (F16 as shipped);
- without flash attention every layer materialises the attention scores
  KQ = 4 * H * n^2 (f32; soft_max runs in place), and llama.cpp implements
  Qwen2.5-VL's window attention as full attention under an n x n f32 mask
  (4 * n^2, alive through all layers), so window layers save no memory;
  buffer = max(4Hn^2 + 4n^2 + n(20d + 12p^2), 4n^2 + n(12f + 22d + 12p^2));
- with flash attention no score matrix exists; the mask is cast once to f16
  (6 n^2 while both copies live) and copied per window layer (4 n^2):
  buffer = max(6n^2 + n(16d + 12p^2), 2n^2 + n(12f + 22d + 12p^2)); without a
  window mask the n^2 terms vanish.
  Here 12p^2 is the f32 RGB input per patch and the d/f terms the residual,
  Q, K, V and FFN activations alive at the time.
- Calibrated against clip's own "compute buffer size" report (CPU backend, the
  same allocator as CUDA) for the Qwen2.5-VL-7B shape (a projector written by
  `write_shape_only_projector`) at 2116, 8464 and 16384 patches: 346.8, 4871.6
  and 17845.0 MiB without flash attention (the formula: within 0.1%), 144.2,
  704.8 and 1893.0 MiB with it (the formula: 0.02% below to 6% above); the
  weights, 1291.4 MiB, exactly. CUDA-only temporaries (cuBLAS workspace,
  flash-attention fix-up) fall in the margin.
- mtmd runs no warmup pass here (engine/mtmd_context sets warmup = false), so
  the buffer is sized by the first real image, not by mtmd's warmup image.
- language side: the plan's weights + KV cache + compute buffer; projectors
  whose image tokens attend non-causally (Gemma 3) need the whole image in one
  ubatch, whose compute buffer the planner's formula sizes. The embeddings wait
  in host memory: tokens x output width x 4 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory
from engine.planning.plan import Plan
from engine.planning.vram_account import compute_bytes as language_compute_bytes
from engine.vision.projector import ProjectorFacts

F32 = 4
# Head sizes ggml-cuda's flash attention has kernels for (K and V of equal size, fattn.cu).
CUDA_FLASH_ATTENTION_HEAD_DIMS = frozenset({40, 64, 72, 80, 96, 112, 128, 256})


@dataclass(frozen=True)
class VisionMemory:
    """The encoder's device bytes for one pass of n_patches: weights and compute buffer."""

    weights_bytes: int
    attention_scores_bytes: int  # the f32 KQ matrix of one layer; 0 with flash attention
    mask_bytes: int  # the window-attention mask copies alive at the worst moment
    activations_bytes: int  # everything linear in n_patches at that moment
    n_patches: int
    flash_attention: bool

    @property
    def compute_bytes(self) -> int:
        return self.attention_scores_bytes + self.mask_bytes + self.activations_bytes

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.compute_bytes


def vision_memory(facts: ProjectorFacts, n_patches: int, flash_attention: bool) -> VisionMemory:
    """Weights plus clip's compute buffer for a pass of n_patches (the formulas above)."""
    n, d, p = n_patches, facts.width, facts.patch_size
    pixels = 12 * p * p  # f32 RGB input per patch
    ffn_phase = n * (12 * facts.ffn + 22 * d + pixels)
    square = n * n
    masked = facts.window_pattern > 0
    if flash_attention:
        phases = [
            (0, 6 * square if masked else 0, n * (16 * d + pixels)),
            (0, 2 * square if masked else 0, ffn_phase),
        ]
    else:
        scores = F32 * facts.n_head * square
        mask = F32 * square if masked else 0
        phases = [(scores, mask, n * (20 * d + pixels)), (0, mask, ffn_phase)]
    scores, mask, activations = max(phases, key=sum)
    return VisionMemory(facts.weights_bytes, scores, mask, activations, n, flash_attention)


def language_image_bytes(
    plan: Plan, inventory: ModelInventory, n_tokens: int, non_causal: bool
) -> int:
    """The language model's device bytes while it evaluates n_tokens image embeddings.

    Weights, KV cache and the compute buffer of the plan; a non-causal projector
    needs the whole image in one ubatch, so its compute buffer grows to that size.
    An embeddings batch (ubatch x width f32) takes the place of the token lookup's
    output of the same size, so a causal image costs nothing beyond the plan.
    """
    account = plan.vram
    if account.total_bytes == 0:
        return 0  # a CPU-only plan keeps nothing on the device
    compute = account.compute_bytes
    if non_causal and n_tokens > plan.n_ubatch:
        bigger = language_compute_bytes(inventory, plan.request, n_tokens)
        compute += bigger - language_compute_bytes(inventory, plan.request, plan.n_ubatch)
    return account.weights_bytes + account.kv_cache_bytes + compute


def flash_attention_supported(profile: Profile, facts: ProjectorFacts) -> bool:
    """ggml's CPU backend runs flash attention at any head size; CUDA has kernels for a few."""
    return profile.gpu is None or facts.head_dim in CUDA_FLASH_ATTENTION_HEAD_DIMS
