"""VLMOpt: planned peak device memory of image Q&A with and without it, on a described GPU.

A shape-true Qwen2.5-VL-7B-class pair - the text model written shape-only
(28 layers, 3584 wide, Q4_K; headers and tensor table, the data a hole in a
sparse file) and the vision tower as described facts (QWEN25_VL_7B: 32 layers,
1280 wide, F16, 1.35 GB) - is planned under a described consumer GPU's budgets
for 16:9 images 640, 1280, 1920 and 2560 pixels wide (2560x1440 is the paper's
1440p; --square for square ones). For each, `engine.vision.plan` predicts the
peak device memory without VLMOpt (plain llama.cpp: the encoder on the GPU
beside the whole plan, no flash attention, the projector's own token limits)
and with it, and prints the ratio, tokens, effective resolution and choices.
The "app" column is what the app runs today: its runtime cannot yet move the
language model's resident weights out of VRAM around an encode, so it plans
without that step-aside (engine.vision.plan's can_step_aside=False).

The encoder's compute-buffer formula is calibrated against llama.cpp's clip
(see engine/vision/plan.py); nothing here runs a model.

    .venv/bin/python bench/vlm_memory.py [--hardware laptop-8gb] [--vram 2GiB] [--square]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from app.cli.commands.plan_command import load_profile_for_planning
from app.screen_text.units import parse_size
from engine.model.inventory import read_inventory
from engine.model.synthetic import write_shape_only_model
from engine.model.synthetic_specs import QWEN25_VL_7B_TEXT
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan
from engine.vision.plan import VisionPlan, plan_vision
from engine.vision.projector import QWEN25_VL_7B

GIB = 1 << 30
BUDGETS_GIB = (8, 4, 2)
WIDTHS = (640, 1280, 1920, 2560)
PAPER = (
    "reference: the paper (MLSys 2026) reports about 20 GB -> 2 GB of VRAM (about 10x less) "
    "for Qwen2.5-VL-7B at 1440p with VLMOpt"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="laptop-8gb")
    parser.add_argument("--vram", type=parse_size, help="one budget (default: 8, 4 and 2 GiB)")
    parser.add_argument("--ctx", type=int, default=8192, help="context window (default 8192)")
    parser.add_argument("--square", action="store_true", help="square images instead of 16:9")
    args = parser.parse_args()
    profile = load_profile_for_planning(args.hardware)
    budgets = [args.vram] if args.vram is not None else [b * GIB for b in BUDGETS_GIB]
    shape = "square" if args.square else "16:9"
    with tempfile.TemporaryDirectory(prefix="vlm-memory-") as folder:
        path = write_shape_only_model(
            Path(folder) / "qwen25vl-7b-text.gguf", QWEN25_VL_7B_TEXT, "Q4_K"
        )
        inventory = read_inventory(path)
        print(
            f"vlm_memory on {args.hardware} ({profile.mode.value} profile): Qwen2.5-VL-7B-class, "
            f"text Q4_K {inventory.tensor_bytes / GIB:.2f} GiB (shape-true), vision F16 "
            f"{QWEN25_VL_7B.weights_bytes / GIB:.2f} GiB (described), context {args.ctx}, "
            f"{shape} images"
        )
        print(PAPER)
        print(
            "tokens: with VLMOpt / the projector's own; peaks are allocated device bytes "
            "(weights, KV, compute buffers), the planner's margin excluded"
        )
        for budget in budgets:
            plan = make_plan(inventory, profile, PlanRequest(budget, n_ctx=args.ctx))
            print(
                f"\nbudget {budget / GIB:.1f} GiB - language model: {plan.reason}; "
                f"{plan.predicted_decode_tokens_per_s:.1f} tokens/s decode"
            )
            print(
                f"{'image':>10} {'effective':>10} {'tokens':>11}  {'peak without':>12} "
                f"{'with':>9} {'ratio':>6} {'app':>9} {'ratio':>6}  {'encoder without':>15} "
                f"{'with':>8}  resident  choices"
            )
            for width in WIDTHS:
                size = (width, width) if args.square else (width, width * 9 // 16)
                vision = plan_vision(plan, inventory, QWEN25_VL_7B, profile, image_size=size)
                today = plan_vision(
                    plan, inventory, QWEN25_VL_7B, profile, image_size=size, can_step_aside=False
                )
                print(row(vision, today))
    return 0


def row(vision: VisionPlan, today: VisionPlan) -> str:
    image, full = vision.image, vision.full_image
    ratio = f"{vision.saving:.1f}x" if vision.saving else "-"
    app_ratio = f"{today.saving:.1f}x" if today.saving else "-"
    tokens = f"{image.n_tokens}/{full.n_tokens}"
    return (
        f"{image.input_width:>5}x{image.input_height:<4} {image.resolution:>10} {tokens:>11}  "
        f"{_gib(vision.peak_without_bytes):>12} {_gib(vision.peak_bytes):>9} {ratio:>6} "
        f"{_gib(today.peak_bytes):>9} {app_ratio:>6}  "
        f"{_gib(vision.vision_without.total_bytes):>15} {_gib(vision.vision.total_bytes):>8}  "
        f"{vision.resident_set.value:9} {vision.options.describe()}"
    )


def _gib(n_bytes: int) -> str:
    return f"{n_bytes / GIB:.2f} GiB"


if __name__ == "__main__":
    sys.exit(main())
