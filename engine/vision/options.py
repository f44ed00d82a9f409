"""How the vision encoder runs for one model + projector pair: the VLMOpt choices.

The planner decides these from the profile and the VRAM budget (see
`vision_plan`); the vision runtime only carries them out. Keeping them in one
plain value lets the CLI and the window print exactly what was done.
"""

from __future__ import annotations

from dataclasses import dataclass

NO_TOKEN_LIMIT = -1  # mtmd's "use the projector's own value"


@dataclass(frozen=True)
class VisionOptions:
    """What the vision runtime does with the encoder, and how large images may be.

    - `encoder_on_gpu`: the projector's weights and compute buffer go to the GPU;
      off, the encoder runs on the CPU and takes no VRAM.
    - `flash_attention`: flash attention inside the vision encoder (smaller
      attention buffers at high resolutions, where the backend has it).
    - `free_after_encode`: overlap avoidance - encode the images, keep their
      embeddings in host memory, free the vision context, then decode, so the
      encoder and the language model's decode are never resident together.
    - `image_min_tokens` / `image_max_tokens`: mtmd's image token budget for
      projectors with dynamic resolution (NO_TOKEN_LIMIT: the projector's own).
    - `max_side_px`: images whose longer side is larger are downscaled to it
      before preprocessing (0: never).
    - `language_steps_aside`: the language model's VRAM (resident weights, KV
      cache, compute buffer) is released while the encoder runs and restored
      before decoding; set only with `free_after_encode`, when the two do not
      fit the budget together and re-uploading costs less than a smaller
      resident set (see `engine.vision.plan`).
    """

    encoder_on_gpu: bool = False
    flash_attention: bool = True
    free_after_encode: bool = False
    image_min_tokens: int = NO_TOKEN_LIMIT
    image_max_tokens: int = NO_TOKEN_LIMIT
    max_side_px: int = 0
    reason: str = ""
    language_steps_aside: bool = False

    def describe(self) -> str:
        """One line a person can read: where the encoder runs and what was limited."""
        where = "GPU" if self.encoder_on_gpu else "CPU"
        parts = [f"vision encoder on the {where}"]
        parts.append("flash attention" if self.flash_attention else "no flash attention")
        if self.free_after_encode:
            parts.append("freed before decoding")
        if self.language_steps_aside:
            parts.append("the language model steps aside while encoding")
        if self.image_max_tokens != NO_TOKEN_LIMIT:
            parts.append(f"at most {self.image_max_tokens} tokens per image")
        if self.max_side_px:
            parts.append(f"images downscaled to {self.max_side_px} px")
        return ", ".join(parts)
