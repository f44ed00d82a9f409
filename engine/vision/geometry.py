"""What one image becomes under a projector: the pixels its encoder sees, the tokens it makes."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.vision.options import NO_TOKEN_LIMIT
from engine.vision.projector import ProjectorFacts, Resolution


@dataclass(frozen=True)
class ImageGeometry:
    """What one image becomes: the pixels the encoder sees and the tokens the LM evaluates."""

    input_width: int
    input_height: int
    width: int
    height: int
    n_tokens: int
    patches_per_pass: int  # the encoder's sequence length (one tile for tiled projectors)
    n_passes: int = 1

    @property
    def resolution(self) -> str:
        return f"{self.width}x{self.height}"

    @property
    def long_side(self) -> int:
        return max(self.width, self.height)


def image_geometry(
    facts: ProjectorFacts,
    width: int,
    height: int,
    max_tokens: int = NO_TOKEN_LIMIT,
    min_tokens: int = NO_TOKEN_LIMIT,
) -> ImageGeometry:
    """The effective resolution and token count mtmd's preprocessor gives this image."""
    if width < 1 or height < 1:
        raise ValueError("an image has at least one pixel per side")
    if facts.resolution is Resolution.DYNAMIC:
        low, high = facts.token_limits
        high = max_tokens if max_tokens > 0 else high
        low = min(min_tokens if min_tokens > 0 else low, high)
        align = facts.align_px
        w, h = _smart_resize(width, height, align, low * align * align, high * align * align)
        tokens = (w // align) * (h // align)
        return ImageGeometry(width, height, w, h, tokens, tokens * facts.merge**2)
    tile_tokens = facts.token_limits[0]
    if facts.resolution is Resolution.TILES:
        edge = facts.longest_edge  # mtmd resizes the longer side to it, up or down
        if width >= height:
            w, h = edge, int(edge / (width / height))
            h += h % 2
        else:
            w, h = int(edge * (width / height)), edge
            w += w % 2
        tiles = math.ceil(w / facts.image_size) * math.ceil(h / facts.image_size)
        passes = tiles + 1  # and an overview of the whole image
        return ImageGeometry(
            width, height, w, h, passes * tile_tokens, facts.patches_per_tile, passes
        )
    size = facts.image_size
    return ImageGeometry(width, height, size, size, tile_tokens, facts.patches_per_tile)


def _smart_resize(
    width: int, height: int, align: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """clip's calc_size_preserved_ratio, in its float32 arithmetic (the rounding matters)."""
    f = np.float32
    step = f(align)

    def round_by(x: float) -> int:
        return int(math.floor(float(f(x) / step) + 0.5)) * align

    w_bar, h_bar = max(align, round_by(width)), max(align, round_by(height))
    if max_pixels > 0 and w_bar * h_bar > max_pixels:
        beta = np.sqrt(f(height) * f(width) / f(max_pixels))
        h_bar = max(align, math.floor(float(f(f(height) / beta) / step)) * align)
        w_bar = max(align, math.floor(float(f(f(width) / beta) / step)) * align)
    elif min_pixels > 0 and w_bar * h_bar < min_pixels:
        beta = np.sqrt(f(min_pixels) / (f(height) * f(width)))
        h_bar = math.ceil(float(f(f(height) * beta) / step)) * align
        w_bar = math.ceil(float(f(f(width) * beta) / step)) * align
    return int(w_bar), int(h_bar)
