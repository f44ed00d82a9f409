"""`shardchat plan`: what it accepts (app.cli.commands.plan_command runs it)."""

from __future__ import annotations

import argparse

from app.cli.arguments.arg_types import positive_int, size
from app.cli.arguments.run_later import run_later
from engine.machine.described_names import shipped_names


def add_plan_command(commands: argparse._SubParsersAction) -> None:
    plan = commands.add_parser(
        "plan",
        help="show the plan for a model under a VRAM budget (any machine, no GPU needed)",
        description="Plan which sub-layers live in VRAM and how each token tier runs.",
    )
    plan.add_argument("--model", "-m", metavar="PATH", help="GGUF model (default: embedded)")
    plan.add_argument(
        "--vram", type=size, metavar="SIZE",
        help="the VRAM budget, e.g. 6GiB, 0 (default: all of a described machine's GPU, or "
        "what other programs leave free on this machine's)",
    )  # fmt: skip
    plan.add_argument("--ctx", type=positive_int, default=4096, help="context window in tokens")
    plan.add_argument("--parallel", type=positive_int, default=1, help="sequences decoded together")
    plan.add_argument("--prompt-tokens", type=positive_int, default=512, metavar="N")
    plan.add_argument(
        "--hardware",
        metavar="PROFILE",
        help=f"a profile JSON file or a described machine ({', '.join(shipped_names())}); "
        "default: this machine's stored profile",
    )
    plan.add_argument(
        "--mmproj",
        metavar="PATH",
        help="the model's vision projector: also plan VLMOpt (where the encoder runs, image size)",
    )
    plan.add_argument(
        "--image-px",
        type=image_px,
        metavar="N|WxH",
        help="the image to plan for: N is a 16:9 image N pixels wide, or give WxH "
        "(default: the largest image the projector takes by itself)",
    )
    plan.add_argument(
        "--placement",
        default="auto",
        metavar="auto|cpu|layers:N|cpu-moe:N",
        help="auto: the planner's choice (default); cpu: CPU only; layers:N: llama.cpp's "
        "n_gpu_layers=N (the output layer and the last N-1 blocks on the GPU); cpu-moe:N: the "
        "experts of the first N blocks in host memory, everything else on the GPU (MoE models)."
        " A manual placement is shown beside the planner's choice",
    )
    plan.add_argument(
        "--gpu",
        type=int,
        default=None,
        metavar="INDEX",
        help="which GPU, as llama.cpp numbers them (default 0)",
    )
    plan.add_argument(
        "--details", action="store_true",
        help="also show llama.cpp's parameters and the cost of each step size (token tier)",
    )  # fmt: skip
    plan.add_argument(
        "--lent", action="store_true",
        help="also plan a split onto the lent computers (shardchat devices), from what was "
        "measured when they were added; nothing is contacted",
    )  # fmt: skip
    plan.add_argument(
        "--here", type=size, metavar="SIZE",
        help="with --lent: what this machine gives the model (default: the memory free now, "
        "less 1 GiB)",
    )  # fmt: skip
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(command="plan", run=run_later("app.cli.commands.plan_command", "run_plan"))


def image_px(text: str) -> tuple[int, int]:
    """'2560' -> (2560, 1440) (16:9), '1920x1080' -> (1920, 1080)."""
    try:
        sides = [int(part) for part in text.lower().split("x")]
    except ValueError:
        sides = []
    if len(sides) == 1:
        sides.append(round(sides[0] * 9 / 16))
    if len(sides) != 2 or min(sides) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an image size (N or WxH pixels)")
    return sides[0], sides[1]
