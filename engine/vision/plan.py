"""VLMOpt planning: where the vision encoder runs and how large an image may be, from the budget.

Given the language model's plan, the projector's facts, the profile and an
image size, `plan_vision` predicts the device memory of encoding the image and
of evaluating its tokens, and chooses the `VisionOptions` the runtime applies:

- encoder weights on the GPU only when some arrangement fits the budget, else
  on the CPU (and a machine without a GPU runs everything on the CPU);
- flash attention where the backend has a kernel for the encoder's head size;
- overlap avoidance: when the encoder and the language model do not fit
  together, the vision context is freed after encoding (the embeddings stay in
  host memory) and either the language model's resident set steps aside while
  encoding and is re-uploaded afterwards (peak = the larger of the two), or it
  is made smaller so that both fit (peak = their sum, within the budget) -
  whichever costs less time: re-uploading the resident weights and the KV cache
  (saved to host and back: 2x its bytes) at the profile's pinned host-to-device
  bandwidth, per image, against the slower decode of an answer (answer_tokens)
  and prefill of the image tokens the cost model predicts for the smaller set;
- for dynamic-resolution projectors (Qwen2-VL family), the largest image token
  budget (mtmd image_max_tokens) that fits, and the image downscaled to match.

Peaks are allocated bytes, margins excluded; the budget checks add the planner's
margin. "Without VLMOpt" is the paper's baseline, plain llama.cpp as it was: the
encoder on the GPU beside the whole plan and kept there, no flash attention, the
projector's own token limits (today's mtmd default, flash_attn auto, would turn
flash attention on where the backend has it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory
from engine.planning.plan import Plan
from engine.planning.planner import make_plan
from engine.vision.geometry import ImageGeometry, image_geometry
from engine.vision.memory import F32, VisionMemory, language_image_bytes, vision_memory
from engine.vision.options import VisionOptions
from engine.vision.plan_choice import (
    ResidentSet,
    VisionInputs,
    choose_on_cpu,
    choose_on_gpu,
    largest_default_image,
)
from engine.vision.projector import ProjectorFacts

DEFAULT_ANSWER_TOKENS = 256  # the answer a smaller resident set is costed for


@dataclass(frozen=True)
class VisionPlan:
    """The VLMOpt choices for one image size, and what they predict."""

    options: VisionOptions
    projector: ProjectorFacts
    image: ImageGeometry  # under the options
    full_image: ImageGeometry  # at the projector's own limits: plain llama.cpp
    resident_set: ResidentSet
    language_plan: Plan  # the plan to run: the given one, or the smaller one chosen
    vision: VisionMemory  # with VLMOpt
    vision_without: VisionMemory  # no flash attention, full-resolution tokens
    peak_bytes: int  # predicted peak device bytes with VLMOpt
    peak_without_bytes: int  # encoder and language model resident together, plain llama.cpp
    encode_bytes: int  # device bytes while encoding (with VLMOpt)
    decode_bytes: int  # device bytes while evaluating the image tokens and decoding
    budget_bytes: int
    host_embedding_bytes: int
    restore_s: float | None = None  # per image turn, when weighed
    shrink_s: float | None = None
    reasons: tuple[str, ...] = ()

    @property
    def effective_resolution(self) -> str:
        return self.image.resolution

    @property
    def n_tokens(self) -> int:
        return self.image.n_tokens

    @property
    def saving(self) -> float | None:
        """Peak without VLMOpt over peak with it (None where nothing is on the device)."""
        return self.peak_without_bytes / self.peak_bytes if self.peak_bytes > 0 else None

    def describe(self) -> str:
        return "\n".join([self.options.describe(), *self.reasons])


def plan_vision(
    plan: Plan,
    inventory: ModelInventory,
    facts: ProjectorFacts,
    profile: Profile,
    budget_bytes: int | None = None,
    image_size: tuple[int, int] | None = None,
    *,
    answer_tokens: int = DEFAULT_ANSWER_TOKENS,
    can_step_aside: bool = True,
) -> VisionPlan:
    """Choose the VLMOpt options for an image of image_size (w, h) under the budget.

    budget_bytes defaults to the plan's budget (another budget re-plans the
    language model for it). image_size defaults to the largest image the
    projector accepts by itself, so the options hold for any image. With
    can_step_aside=False the language model's resident set is never evicted
    (for a runtime that cannot re-upload it); a smaller one may still be chosen.
    """
    if facts.out_dim and inventory.n_embd and facts.out_dim != inventory.n_embd:
        raise ValueError(
            f"the projector makes {facts.out_dim}-wide embeddings but {inventory.name} takes "
            f"{inventory.n_embd}: it belongs to another model"
        )
    budget = plan.request.vram_budget_bytes if budget_bytes is None else budget_bytes
    if budget != plan.request.vram_budget_bytes:
        plan = make_plan(inventory, profile, replace(plan.request, vram_budget_bytes=budget))
    width, height = image_size or largest_default_image(facts)
    full = image_geometry(facts, width, height)
    vision_without = vision_memory(facts, full.patches_per_pass, flash_attention=False)
    language_full = language_image_bytes(plan, inventory, full.n_tokens, facts.non_causal)
    common = VisionInputs(plan, inventory, facts, profile, budget, width, height, full)
    if profile.gpu is None:
        chosen = choose_on_cpu(common, "no GPU in the profile: the vision encoder runs on the CPU")
    else:
        chosen = choose_on_gpu(common, answer_tokens, can_step_aside)
    peak_without = 0 if profile.gpu is None else language_full + vision_without.total_bytes
    return VisionPlan(
        options=chosen.options,
        projector=facts,
        image=chosen.image,
        full_image=full,
        resident_set=chosen.resident_set,
        language_plan=chosen.language_plan,
        vision=chosen.vision,
        vision_without=vision_without,
        peak_bytes=max(chosen.encode_bytes, chosen.decode_bytes),
        peak_without_bytes=peak_without,
        encode_bytes=chosen.encode_bytes,
        decode_bytes=chosen.decode_bytes,
        budget_bytes=budget,
        host_embedding_bytes=chosen.image.n_tokens * facts.out_dim * F32,
        restore_s=chosen.restore_s,
        shrink_s=chosen.shrink_s,
        reasons=tuple(chosen.reasons),
    )
