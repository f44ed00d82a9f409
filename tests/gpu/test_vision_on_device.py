"""The vision encoder on the device: encode there, free it, then decode (synthetic pair)."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
from PIL import Image

from engine.generation.sampling import SamplingSettings
from engine.llama import log_capture as llama_log
from engine.llama.device_buffers import parse_buffer_lines
from engine.llama.load_params import LoadParams
from engine.model.image_input import ImageFile
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import load_model
from engine.vision.options import VisionOptions
from engine.vision.runtime import attach_projector
from tests.synthetic_vision import write_synthetic_vlm

GREEDY = SamplingSettings(temperature=0.0, max_tokens=4)


def red_picture() -> ImageFile:
    buffer = io.BytesIO()
    Image.new("RGB", (48, 40), "red").save(buffer, "PNG")
    return ImageFile("red.png", buffer.getvalue())


def test_the_encoder_runs_on_the_device_and_is_freed_before_the_language_model_decodes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model_file, projector = write_synthetic_vlm(tmp_path / "vlm")
    options = VisionOptions(free_after_encode=True, encoder_on_gpu=True)
    llama_log.install()
    caplog.set_level(logging.INFO)  # llama.cpp's lines and the runtime's, in one order
    model = load_model(LoadParams(str(model_file), n_ctx=1024, n_threads=2, n_gpu_layers=99))
    try:
        vision = attach_projector(model, str(projector), options)
        reply = ChatSession(model).reply("What colour?", GREEDY, images=[red_picture()])
    finally:
        model.close()
    lines = [record.getMessage() for record in caplog.records]
    assert reply.stats.generated_tokens > 0
    assert vision.events[0] == "vision context opened on the GPU"
    assert vision.events[-2:] == ["vision context freed", "language decode started"]
    # llama.cpp's own report: clip chose the Vulkan device and reserved its compute there
    assert "clip_ctx: CLIP using Vulkan0 backend" in lines
    clip_reserve = [line for line in lines if line.startswith("reserve_compute_meta:")]
    assert parse_buffer_lines(clip_reserve).role_bytes("compute") > 0
    freed = lines.index("vision context freed before decoding")
    assert max(lines.index(line) for line in clip_reserve) < freed
    prompt = next(i for i, line in enumerate(lines) if line.startswith("prompt: "))
    assert freed < prompt
    language = parse_buffer_lines(line for line in lines if not line.startswith("reserve_"))
    assert language.role_bytes("model") > 0, "the language model is on the device too"
