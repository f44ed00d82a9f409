"""The real image path with a tiny synthetic Gemma 3 model and projector.

Load, preprocess, encode, free, decode: llama.cpp's mtmd library does every
step for real; only the weights are random, so replies are gibberish and the
tests check what the path did, not what the model said.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
from PIL import Image

from engine.errors import BadInputError
from engine.generation.sampling import SamplingSettings
from engine.llama.load_params import LoadParams
from engine.model.chat_message import MEDIA_MARKER, ChatMessage
from engine.model.image_input import ImageFile, decode_image
from engine.model.synthetic_spec import SyntheticSpec
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import LoadedModel, load_model
from engine.vision.options import VisionOptions
from engine.vision.runtime import attach_projector
from tests.synthetic_vision import ProjectorSpec, write_synthetic_projector, write_synthetic_vlm

GREEDY = SamplingSettings(temperature=0.0, max_tokens=6)


@pytest.fixture(scope="module")
def vlm_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_synthetic_vlm(tmp_path_factory.mktemp("vlm"))


@pytest.fixture
def vlm(vlm_files: tuple[Path, Path]) -> LoadedModel:
    model = load_model(LoadParams(str(vlm_files[0]), n_ctx=1024, n_threads=2))
    yield model
    model.close()


def picture(colour: str, size: tuple[int, int] = (48, 40), name: str = "pic.png") -> ImageFile:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, "PNG")
    return ImageFile(name, buffer.getvalue())


def digest(image: ImageFile) -> str:
    return decode_image(image.data, image.name).digest


def test_the_marker_is_the_one_mtmd_replaces() -> None:
    from llama_cpp import mtmd_cpp

    assert mtmd_cpp.mtmd_default_marker().decode() == MEDIA_MARKER
    message = ChatMessage("user", "What is it?", (picture("red"), picture("blue")))
    assert message.to_dict()["content"] == f"{MEDIA_MARKER}\n{MEDIA_MARKER}\nWhat is it?"


def test_encoder_is_freed_before_the_language_model_decodes(
    vlm: LoadedModel, vlm_files: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """Overlap avoidance, checked through llama.cpp's own report of the encoder's buffers."""
    vision = attach_projector(vlm, str(vlm_files[1]), VisionOptions(free_after_encode=True))
    caplog.set_level(logging.INFO)
    reply = ChatSession(vlm).reply("What colour is it?", GREEDY, images=[picture("red")])
    assert reply.stats.generated_tokens > 0 and reply.stats.prompt_tokens > 16
    assert vision.events == [
        "vision context opened on the CPU",
        f"encoded {digest(picture('red'))[:12]} (16 tokens)",
        "vision context freed",
        "language decode started",
    ]
    lines = [record.getMessage() for record in caplog.records]
    allocated = next(i for i, line in enumerate(lines) if "compute buffer size" in line
                     and "reserve_compute_meta" in line)  # fmt: skip
    freed = lines.index("vision context freed before decoding")
    decoded = next(i for i, line in enumerate(lines) if line.startswith("prompt: "))
    assert allocated < freed < decoded and not vision.encoder_open


def test_images_are_encoded_once_and_reused_as_the_conversation_goes_on(
    vlm: LoadedModel, vlm_files: tuple[Path, Path]
) -> None:
    vision = attach_projector(vlm, str(vlm_files[1]))
    session = ChatSession(vlm)
    red, blue = picture("red"), picture("blue", (30, 60), "blue.png")
    first = session.reply("Compare these.", GREEDY, images=[red, blue, red])
    assert vision.images_encoded == 2  # the same pixels twice: one encode
    second = session.reply("And now?", GREEDY)
    third = session.reply("Once more with the red one.", GREEDY, images=[red])
    assert vision.images_encoded == 2  # later turns re-use the history's images' embeddings
    reuses = [event for event in vision.events if event.startswith("reused")]
    assert reuses == ["reused 1 cached image(s)", "reused 3 cached image(s)",
                      "reused 4 cached image(s)"]  # fmt: skip
    assert second.stats.reused_prompt_tokens > first.stats.prompt_tokens - 8  # KV kept
    assert third.stats.prompt_tokens > second.stats.prompt_tokens + 16
    assert vision.encoder_open  # this plan keeps the encoder between turns
    assert [len(m.images) for m in session.messages if m.role == "user"] == [3, 0, 1]


def test_text_turns_after_a_text_only_session_still_work(
    vlm: LoadedModel, vlm_files: tuple[Path, Path]
) -> None:
    attach_projector(vlm, str(vlm_files[1]))
    session = ChatSession(vlm)
    plain = session.reply("Hello", GREEDY)
    with_image = session.reply("Look", GREEDY, images=[picture("green")])
    assert plain.stats.generated_tokens > 0 and with_image.stats.generated_tokens > 0


def test_a_model_without_a_projector_refuses_images_and_keeps_the_history(
    vlm: LoadedModel,
) -> None:
    session = ChatSession(vlm)
    with pytest.raises(BadInputError, match="cannot see images: it has no vision projector"):
        session.reply("What is this?", GREEDY, images=[picture("red")])
    assert session.messages == []
    assert session.reply("Just text then.", GREEDY).stats.generated_tokens > 0


def test_a_projector_for_another_model_is_refused(vlm: LoadedModel, tmp_path: Path) -> None:
    other = write_synthetic_projector(tmp_path / "mmproj-other.gguf", ProjectorSpec(96))
    with pytest.raises(BadInputError, match="made for another model .*96-wide"):
        attach_projector(vlm, str(other))
    assert vlm.vision is None


def test_a_language_model_is_not_a_projector(vlm: LoadedModel, make_synthetic) -> None:
    model_file = make_synthetic("llama")
    with pytest.raises(BadInputError, match="not a vision projector"):
        attach_projector(vlm, str(model_file))


def test_more_images_than_places_is_refused_in_a_sentence(
    vlm: LoadedModel, vlm_files: tuple[Path, Path]
) -> None:
    vision = attach_projector(vlm, str(vlm_files[1]))
    with pytest.raises(BadInputError, match="1 image place.* but 2 image"):
        vision.prepare(
            f"{MEDIA_MARKER} two?", [decode_image(picture(c).data, c) for c in ("red", "blue")]
        )


def test_odd_image_shapes_encode(vlm: LoadedModel, vlm_files: tuple[Path, Path]) -> None:
    vision = attach_projector(vlm, str(vlm_files[1]))
    for size in ((2, 2), (3000, 20), (20, 3000)):
        reply = ChatSession(vlm).reply("Shape?", GREEDY, images=[picture("gray", size)])
        assert reply.stats.generated_tokens > 0, size
    assert vision.images_encoded == 3


def test_a_larger_model_width_pairs_with_its_own_projector(tmp_path: Path) -> None:
    model_file, mmproj = write_synthetic_vlm(
        tmp_path, SyntheticSpec("gemma3", n_embd=96, n_head=4, n_head_kv=2)
    )
    model = load_model(LoadParams(str(model_file), n_ctx=512, n_threads=2))
    try:
        attach_projector(model, str(mmproj))
        assert ChatSession(model).reply("?", GREEDY, images=[picture("red")]).text is not None
    finally:
        model.close()


def test_a_broken_image_is_refused_before_it_joins_the_conversation(
    vlm: LoadedModel, vlm_files: tuple[Path, Path]
) -> None:
    attach_projector(vlm, str(vlm_files[1]))
    session = ChatSession(vlm)
    broken = ImageFile("broken.png", picture("red").data[:50])
    with pytest.raises(BadInputError, match="broken.png: the image data is damaged"):
        session.reply("What is it?", GREEDY, images=[broken])
    assert session.messages == []
    assert session.reply("Fine.", GREEDY, images=[picture("red")]).stats.generated_tokens > 0


def test_the_plan_s_size_limit_downscales_before_encoding(
    vlm: LoadedModel, vlm_files: tuple[Path, Path]
) -> None:
    vision = attach_projector(vlm, str(vlm_files[1]), VisionOptions(max_side_px=64))
    seen = vision.decoded(picture("red", (640, 320)))
    assert (seen.width, seen.height) == (64, 32) and "downscaled to 64x32" in seen.describe()


def test_a_conversation_with_images_goes_on_in_text_on_a_model_without_vision(
    vlm: LoadedModel, vlm_files: tuple[Path, Path]
) -> None:
    attach_projector(vlm, str(vlm_files[1]))
    seeing = ChatSession(vlm)
    seeing.reply("What is it?", GREEDY, images=[picture("red")])
    vlm.vision.close()
    vlm.vision = None  # the same conversation, now on a model that cannot see
    blind = ChatSession(vlm, history=seeing.messages)
    reply = blind.reply("Tell me more.", GREEDY)
    assert reply.stats.generated_tokens > 0 and blind.messages[0].images  # kept, not shown
    with pytest.raises(BadInputError, match="cannot see images"):
        blind.reply("And this one?", GREEDY, images=[picture("blue")])
