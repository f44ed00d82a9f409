"""The VLMOpt choice itself: encoder on the CPU or the GPU, and how it shares the budget."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum

from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory
from engine.planning.plan import Plan
from engine.planning.planner import make_plan
from engine.planning.vram_account import margin_bytes
from engine.vision.geometry import ImageGeometry, image_geometry
from engine.vision.memory import (
    VisionMemory,
    flash_attention_supported,
    language_image_bytes,
    vision_memory,
)
from engine.vision.options import NO_TOKEN_LIMIT, VisionOptions
from engine.vision.projector import ProjectorFacts, Resolution

GIB = 1 << 30
TEXT_ROOM_TOKENS = 512  # context left for the question and the answer beside an image


class ResidentSet(str, Enum):
    """What happens to the language model's resident set while an image is encoded."""

    KEPT = "kept"  # untouched: the encoder fits beside it, or runs on the CPU
    RESTORED = "restored"  # steps aside while encoding, re-uploaded before decoding
    SHRUNK = "shrunk"  # a smaller resident set that leaves room for the encoder


@dataclass(frozen=True)
class VisionInputs:
    plan: Plan
    inventory: ModelInventory
    facts: ProjectorFacts
    profile: Profile
    budget: int
    width: int
    height: int
    full: ImageGeometry

    @property
    def context_cap(self) -> int:
        """Image tokens that leave room for the question and answer in the context window."""
        n_ctx = self.plan.request.n_ctx
        return max(n_ctx - TEXT_ROOM_TOKENS, n_ctx // 2)

    def language_bytes(self, tokens: int, plan: Plan | None = None) -> int:
        return language_image_bytes(
            plan or self.plan, self.inventory, tokens, self.facts.non_causal
        )


@dataclass
class Choice:
    options: VisionOptions
    image: ImageGeometry
    vision: VisionMemory
    resident_set: ResidentSet
    language_plan: Plan
    encode_bytes: int
    decode_bytes: int
    reasons: list[str]
    restore_s: float | None = None
    shrink_s: float | None = None


def largest_default_image(facts: ProjectorFacts) -> tuple[int, int]:
    if facts.resolution is Resolution.DYNAMIC:
        side = math.isqrt(facts.token_limits[1]) * facts.align_px
        return side, side
    if facts.resolution is Resolution.TILES:
        return facts.longest_edge, facts.longest_edge
    return facts.image_size, facts.image_size


def choose_on_cpu(c: VisionInputs, why: str) -> Choice:
    """The encoder in host memory: no VRAM, the language model's plan untouched."""
    image = _context_capped(c)
    flash = True  # ggml's CPU backend has flash attention at every head size
    vision = vision_memory(c.facts, image.patches_per_pass, flash)
    language = c.language_bytes(image.n_tokens)
    options = VisionOptions(
        encoder_on_gpu=False,
        flash_attention=flash,
        free_after_encode=False,
        image_max_tokens=_cap_option(c, c.context_cap),
        max_side_px=_downscale_px(c, image),
        reason=why,
    )
    reasons = [
        why,
        f"host memory for encoding: {_gib(vision.total_bytes)} (flash attention: "
        f"{'yes' if flash else 'no'})",
        _tokens_line(c, image, _limit_cause(c, image, c.context_cap, "")),
    ]
    return Choice(options, image, vision, ResidentSet.KEPT, c.plan, language, language, reasons)


def choose_on_gpu(c: VisionInputs, answer_tokens: int, can_step_aside: bool) -> Choice:
    flash = flash_attention_supported(c.profile, c.facts)
    margin = margin_bytes(c.budget)
    cap = c.context_cap
    language = c.language_bytes(c.full.n_tokens)
    # 1. beside the whole resident set
    together = _largest_tokens(c, c.budget - margin - language, flash, cap)
    image = _limited(c, together, cap)
    if together is not None and image.n_tokens >= _context_capped(c).n_tokens:
        return _together(c, image, flash, together, language)
    # 2. alone on the device (the encoder's weights must fit the budget at its smallest)
    alone = _largest_tokens(c, c.budget - margin, flash, cap)
    if alone is None:
        smallest = _smallest_vision(c, flash)
        return choose_on_cpu(
            c,
            f"the vision encoder needs {_gib(smallest)} at its smallest image, more than the "
            f"{_gib(c.budget - margin)} the budget leaves: it runs on the CPU",
        )
    image = _limited(c, alone, cap)
    vision = vision_memory(c.facts, image.patches_per_pass, flash)
    restore = _restore_choice(c, image, vision, flash, alone)
    shrink = _shrink_choice(c, image, vision, flash, answer_tokens)
    if can_step_aside and (
        shrink is None or _seconds(restore.restore_s) <= _seconds(shrink.shrink_s)
    ):
        chosen = restore
    elif shrink is not None:
        chosen = shrink
    else:
        return choose_on_cpu(
            c,
            "the encoder fits only while the language model steps aside, which this runtime "
            "cannot do: it runs on the CPU",
        )
    chosen.restore_s = restore.restore_s
    chosen.shrink_s = shrink.shrink_s if shrink is not None else None
    chosen.reasons.append(_weighing_line(chosen, restore, shrink, answer_tokens, can_step_aside))
    return chosen


def _together(
    c: VisionInputs, image: ImageGeometry, flash: bool, limit: int, language: int
) -> Choice:
    vision = vision_memory(c.facts, image.patches_per_pass, flash)
    peak = language + vision.total_bytes
    options = VisionOptions(
        encoder_on_gpu=True,
        flash_attention=flash,
        free_after_encode=False,
        image_min_tokens=_min_option(c, limit),
        image_max_tokens=_cap_option(c, limit),
        max_side_px=_downscale_px(c, image),
        reason="the encoder fits beside the language model's resident set",
    )
    reasons = [
        f"vision encoder on the GPU beside the language model: {_gib(vision.total_bytes)} + "
        f"{_gib(language)} fit the {_gib(c.budget)} budget with its margin",
        _flash_line(c, image, flash),
        "no overlap avoidance needed: the encoder stays loaded between images",
        _tokens_line(c, image, _limit_cause(c, image, limit, "beside the language model")),
    ]
    return Choice(options, image, vision, ResidentSet.KEPT, c.plan, peak, peak, reasons)


def _seconds(weighed: float | None) -> float:
    """A weighed choice's time; one never weighed loses every comparison."""
    return math.inf if weighed is None else weighed


def _restore_choice(
    c: VisionInputs, image: ImageGeometry, vision: VisionMemory, flash: bool, limit: int
) -> Choice:
    """The resident set steps aside while encoding; re-uploaded over PCIe before decoding."""
    account = c.plan.vram
    moved = account.weights_bytes + 2 * account.kv_cache_bytes  # KV saved to host and back
    gpu = c.profile.gpu
    assert gpu is not None
    seconds = moved / (gpu.h2d_pinned_gbps * 1e9)
    language = c.language_bytes(image.n_tokens)
    options = VisionOptions(
        encoder_on_gpu=True,
        flash_attention=flash,
        free_after_encode=True,
        image_min_tokens=_min_option(c, limit),
        image_max_tokens=_cap_option(c, limit),
        max_side_px=_downscale_px(c, image),
        language_steps_aside=True,
        reason="the encoder and the language model take turns on the GPU",
    )
    reasons = [
        f"vision encoder on the GPU, alone: {_gib(vision.total_bytes)} of the "
        f"{_gib(c.budget)} budget while encoding",
        _flash_line(c, image, flash),
        f"overlap avoidance: encode, keep the embeddings in host memory, free the vision context, "
        f"then decode; peak {_gib(max(vision.total_bytes, language))} = the larger of "
        f"{_gib(vision.total_bytes)} (vision) and {_gib(language)} (language), not their sum",
        _tokens_line(c, image, _limit_cause(c, image, limit, "alone on the GPU")),
    ]
    return Choice(
        options, image, vision, ResidentSet.RESTORED, c.plan, vision.total_bytes, language,
        reasons, restore_s=seconds,
    )  # fmt: skip


def _shrink_choice(
    c: VisionInputs, image: ImageGeometry, vision: VisionMemory, flash: bool, answer_tokens: int
) -> Choice | None:
    """A smaller resident set that leaves the encoder room; None if nothing is left for it."""
    account = c.plan.vram
    extra = c.language_bytes(image.n_tokens) - (
        account.weights_bytes + account.kv_cache_bytes + account.compute_bytes
    )  # beyond the plan's own account: a non-causal image's bigger ubatch
    room = c.budget - vision.total_bytes - max(extra, 0)
    if room <= 0:
        return None
    request = replace(c.plan.request, vram_budget_bytes=room)
    smaller = make_plan(c.inventory, c.profile, request)
    language = c.language_bytes(image.n_tokens, smaller)
    full, small = c.plan, smaller
    per_token = full.request.prompt_tokens
    slower = (
        answer_tokens
        * (1 / small.predicted_decode_tokens_per_s - 1 / full.predicted_decode_tokens_per_s)
        + image.n_tokens * (small.predicted_ttft_s - full.predicted_ttft_s) / per_token
    )
    options = VisionOptions(
        encoder_on_gpu=True,
        flash_attention=flash,
        free_after_encode=True,
        image_min_tokens=_min_option(c, image.n_tokens),
        image_max_tokens=_cap_option(c, image.n_tokens),
        max_side_px=_downscale_px(c, image),
        reason="a smaller resident set leaves the encoder room",
    )
    reasons = [
        f"vision encoder on the GPU beside a smaller resident set: {_gib(vision.total_bytes)} + "
        f"{_gib(language)} ({len(smaller.resident)} of the plan's {len(full.resident)} "
        "sub-layers resident)",
        _flash_line(c, image, flash),
        "the vision context is freed after encoding; the embeddings wait in host memory",
        _tokens_line(c, image, _limit_cause(c, image, image.n_tokens, "beside the smaller set")),
    ]
    peak = vision.total_bytes + language
    return Choice(
        options, image, vision, ResidentSet.SHRUNK, smaller, peak, language, reasons,
        shrink_s=max(slower, 0.0),
    )  # fmt: skip


def _weighing_line(
    chosen: Choice,
    restore: Choice,
    shrink: Choice | None,
    answer_tokens: int,
    can_step_aside: bool,
) -> str:
    upload = f"re-uploading the resident set costs {restore.restore_s:.2f} s per image"
    if shrink is None:
        return f"resident set restored after encoding ({upload}); no smaller set leaves room"
    small = shrink.language_plan
    full = restore.language_plan
    slower = (
        f"a smaller resident set costs {shrink.shrink_s:.2f} s per {answer_tokens}-token answer "
        f"({small.predicted_decode_tokens_per_s:.1f} instead of "
        f"{full.predicted_decode_tokens_per_s:.1f} tokens/s)"
    )
    if chosen is restore:
        return f"resident set restored after encoding: {upload}, less than {slower}"
    if not can_step_aside:
        return f"resident set shrunk: {slower}; this runtime cannot step aside"
    return f"resident set shrunk: {slower}, less than {upload}"


# --- helpers ---


def _largest_tokens(c: VisionInputs, room: int, flash: bool, cap: int) -> int | None:
    """The most image tokens whose encoder fits `room` bytes; None if even the fewest do not."""
    facts = c.facts
    low, high = facts.token_limits
    if facts.resolution is not Resolution.DYNAMIC:
        one_tile_fits = vision_memory(facts, facts.patches_per_tile, flash).total_bytes <= room
        return high if one_tile_fits else None
    high = min(high, max(cap, low))

    def fits(tokens: int) -> bool:
        return vision_memory(facts, tokens * facts.merge**2, flash).total_bytes <= room

    if not fits(low):
        return None
    while low < high:  # the largest fitting count; memory only grows with tokens
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def _limited(c: VisionInputs, limit: int | None, cap: int) -> ImageGeometry:
    if c.facts.resolution is not Resolution.DYNAMIC:
        return c.full
    own = c.facts.token_limits[1]
    tokens = min(own if limit is None else limit, own, cap)
    return image_geometry(c.facts, c.width, c.height, max_tokens=tokens)


def _context_capped(c: VisionInputs) -> ImageGeometry:
    return _limited(c, None, c.context_cap)


def _smallest_vision(c: VisionInputs, flash: bool) -> int:
    facts = c.facts
    low = facts.token_limits[0]
    patches = low * facts.merge**2 if facts.resolution is Resolution.DYNAMIC else None
    return vision_memory(facts, patches or facts.patches_per_tile, flash).total_bytes


def _cap_option(c: VisionInputs, limit: int) -> int:
    """image_max_tokens: only for dynamic projectors, only below their own limit."""
    if c.facts.resolution is not Resolution.DYNAMIC:
        return NO_TOKEN_LIMIT
    limit = min(limit, c.context_cap)
    return limit if limit < c.facts.token_limits[1] else NO_TOKEN_LIMIT


def _min_option(c: VisionInputs, limit: int) -> int:
    """image_min_tokens follows a cap below the projector's own minimum (mtmd needs min <= max)."""
    if c.facts.resolution is not Resolution.DYNAMIC:
        return NO_TOKEN_LIMIT
    own_min = c.facts.token_limits[0]
    return limit if limit < own_min else NO_TOKEN_LIMIT


def _downscale_px(c: VisionInputs, image: ImageGeometry) -> int:
    """max_side_px: the effective long side when the plan shrinks a dynamic image below it."""
    if c.facts.resolution is not Resolution.DYNAMIC or image.n_tokens >= c.full.n_tokens:
        return 0
    return image.long_side


def _limit_cause(c: VisionInputs, image: ImageGeometry, limit: int, where: str) -> str:
    """Why this image was downscaled, or why larger ones would be."""
    if c.facts.resolution is not Resolution.DYNAMIC:
        return ""
    limit = min(limit, c.context_cap)
    cause = "the context window" if limit >= c.context_cap else f"what fits {where}"
    if image.n_tokens < c.full.n_tokens:
        return cause
    if limit < c.facts.token_limits[1]:
        return f"larger images capped at {limit} tokens: {cause}"
    return ""


def _tokens_line(c: VisionInputs, image: ImageGeometry, cause: str) -> str:
    full = c.full
    head = f"image {image.input_width}x{image.input_height}"
    if c.facts.resolution is Resolution.TILES:
        body = (
            f"{image.n_passes - 1} tiles + overview at {image.resolution}, {image.n_tokens} tokens"
        )
    elif image.n_tokens < full.n_tokens:
        body = (
            f"downscaled to {image.resolution}, {image.n_tokens} tokens instead of "
            f"{full.n_tokens} at {full.resolution}"
        )
    else:
        body = f"encoded at {image.resolution}, {image.n_tokens} tokens"
    line = f"{head}: {body}"
    if cause:
        line += f" ({cause})"
    if image.n_tokens > c.context_cap:
        line += f"; more than the {c.plan.request.n_ctx}-token context can hold with a question"
    return line


def _flash_line(c: VisionInputs, image: ImageGeometry, flash: bool) -> str:
    if not flash:
        return (
            f"no flash attention: CUDA has no kernel for the encoder's head size {c.facts.head_dim}"
        )
    scores = vision_memory(c.facts, image.patches_per_pass, False).attention_scores_bytes
    return f"flash attention in the encoder: no {_gib(scores)} attention-score matrix per layer"


def _gib(n_bytes: int | float) -> str:
    return f"{n_bytes / GIB:.2f} GiB"
