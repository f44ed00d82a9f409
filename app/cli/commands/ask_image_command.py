"""`shardchat ask-image IMAGE... QUESTION`: one question about one or more images.

The answer streams to standard output; what the vision path did (the VLMOpt
choices, each image's effective resolution, what was encoded and freed) goes
to standard error, so the answer can be piped on its own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.cli.arguments.ask_image import IMAGE_QUESTION_SAMPLING
from app.cli.arguments.sampling_options import sampling_from
from app.model_lifecycle.load_planning import LoadRequest, stored_profile
from app.stores.model_library import projector_for, prompt_format_for
from engine.errors import BadInputError
from engine.generation.stats import GenerationStats
from engine.model.default_model import default_model_path
from engine.model.image_input import image_file
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import inspect_model, load_model
from engine.vision.runtime import attach_projector


def run_ask_image(args: argparse.Namespace) -> int:
    if len(args.items) < 2:
        raise BadInputError("give at least one IMAGE and then the QUESTION")
    *image_paths, question = args.items
    if not question.strip():
        raise BadInputError("the question is empty")
    model_path = inspect_model(args.model or default_model_path()).path
    mmproj = _projector(args, Path(model_path))
    images = [image_file(path) for path in image_paths]  # a bad one is refused before loading
    profile = stored_profile()
    if args.vram is not None and profile is None:
        raise BadInputError("--vram needs this machine's profile: run `shardchat profile` first")
    load = LoadRequest(str(model_path), args.ctx, profile, args.vram, mmproj).planned()
    if load.vision is None:
        raise BadInputError(load.vision_problem or f"{mmproj}: not a usable vision projector")
    vision = load.vision
    model = load_model(load.params, prompt_format_for(model_path, args.prompt_format))
    try:
        runtime = attach_projector(model, mmproj, vision.options)
        settings = sampling_from(args, IMAGE_QUESTION_SAMPLING)
        reply = ChatSession(model).reply(
            question, settings, on_text=lambda text: print(text, end="", flush=True),
            images=images,
        )  # fmt: skip
        print()
        seen = [runtime.decoded(image).describe() for image in images]
    finally:
        model.close()
    _report(vision.summary, seen, runtime.events, reply.stats)
    return 0


def _projector(args: argparse.Namespace, model_path: Path) -> str:
    if args.mmproj:
        path = Path(args.mmproj)
        if not path.is_file():
            raise BadInputError(f"{path}: no such projector file")
        return str(path)
    found = projector_for(model_path)
    if found is None:
        raise BadInputError(
            f"{model_path.name} has no vision projector: pass --mmproj PATH (the mmproj GGUF "
            "made for this model), or put it beside the model with 'mmproj' in its name"
        )
    return str(found)


def _report(plan: str, images: list[str], events: list[str], stats: GenerationStats) -> None:
    err = sys.stderr
    print(f"vlmopt: {plan}", file=err)
    for line in images:
        print(f"image: {line}", file=err)
    print(f"vision: {'; '.join(events)}", file=err)
    print(f"tokens: {stats.prompt_tokens} prompt, {stats.generated_tokens} generated", file=err)
