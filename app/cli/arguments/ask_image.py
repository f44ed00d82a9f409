"""`shardchat ask-image`: what it accepts (app.cli.commands.ask_image_command runs it)."""

from __future__ import annotations

import argparse

from app.cli.arguments.arg_types import add_prompt_format_option, positive_int, size
from app.cli.arguments.run_later import run_later
from app.cli.arguments.sampling_options import add_sampling_options
from engine.generation.sampling import SamplingSettings

IMAGE_QUESTION_SAMPLING = SamplingSettings(temperature=0.2)  # a description, not a story


def add_ask_image_command(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "ask-image",
        help="ask a vision model about one or more images",
        description=(
            "Answer QUESTION about the IMAGE files (PNG, JPEG, WebP, BMP, GIF) with a vision "
            "model: a GGUF model plus its projector (mmproj). Without --mmproj, a projector "
            "beside the model whose name holds 'mmproj' is used."
        ),
    )
    cmd.add_argument("items", nargs="+", metavar="IMAGE... QUESTION")
    cmd.add_argument("--model", "-m", metavar="PATH", help="GGUF language model")
    cmd.add_argument("--mmproj", metavar="PATH", help="the model's vision projector (GGUF)")
    cmd.add_argument(
        "--vram", type=size, default=None, metavar="SIZE",
        help="VRAM budget for VLMOpt (default: what other programs leave free; 0: CPU only)",
    )  # fmt: skip
    cmd.add_argument("--ctx", type=positive_int, default=4096, help="context window in tokens")
    add_sampling_options(cmd, IMAGE_QUESTION_SAMPLING)
    add_prompt_format_option(cmd)
    cmd.set_defaults(
        command="ask-image", run=run_later("app.cli.commands.ask_image_command", "run_ask_image")
    )
