"""One sampler for every path: the repetition penalty and DRY change the tokens sampled, and
a chat turn, an image turn and a summary job's sequence sample alike with the same settings.

The default model with a synthetic projector of its width attached: a turn
without images goes through the vision runtime's path, one with an image
through its embeddings, a batch job through its own context - each a stream
of the one scheduler, drawing through its own `TokenSampler`.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from engine.batch.generator import BatchGenerator, BatchRequest, BatchResult
from engine.cancel import CancelToken
from engine.generation.sampling import SamplingSettings
from engine.llama.load_params import LoadParams
from engine.model.chat_message import ChatMessage
from engine.model.image_input import ImageFile
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import LoadedModel, load_model
from engine.vision.runtime import attach_projector
from tests.synthetic_vision import ProjectorSpec, write_synthetic_projector

N_CTX = 1024
QUESTION = "List the days of the week."
SEEDED = SamplingSettings(temperature=0.8, seed=7, repeat_penalty=1.0, max_tokens=40)
SETTINGS = {
    "no penalty": SEEDED,
    "repeat penalty": SEEDED.with_changes(repeat_penalty=1.5),
    "DRY": SEEDED.with_changes(dry_multiplier=2.0),
}


@pytest.fixture(scope="module")
def seeing_model(
    default_model_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LoadedModel]:
    model = load_model(LoadParams(str(default_model_file), n_ctx=N_CTX, n_threads=2))
    width = model.handle.n_embd_inp
    projector = write_synthetic_projector(
        tmp_path_factory.mktemp("projector") / "mmproj.gguf", ProjectorSpec(projection_dim=width)
    )
    attach_projector(model, str(projector))
    yield model
    model.close()


def chat_turn(model: LoadedModel, settings: SamplingSettings) -> str:
    return ChatSession(model).reply(QUESTION, settings).text


def vision_turn(model: LoadedModel, settings: SamplingSettings) -> str:
    assert model.vision is not None
    rendered = model.chat_template.render([ChatMessage("user", QUESTION)])
    stream = model.vision.stream_reply(rendered, [], settings, CancelToken(), False)
    return "".join(r.text for r in stream)


def batch_sequence(model: LoadedModel, settings: SamplingSettings) -> str:
    results: list[BatchResult] = []
    request = BatchRequest("doc", (ChatMessage("user", QUESTION),), settings.max_tokens)
    with BatchGenerator(model, 1, N_CTX, settings, share_prefix=False) as generator:
        generator.run([request], results.append)
    return results[0].text


def image_turn(model: LoadedModel, settings: SamplingSettings) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), "red").save(buffer, "PNG")
    image = ImageFile("red.png", buffer.getvalue())
    return ChatSession(model).reply(QUESTION, settings, images=[image]).text


def test_chat_image_and_batch_paths_sample_alike(seeing_model: LoadedModel) -> None:
    for name, settings in SETTINGS.items():
        chat = chat_turn(seeing_model, settings)
        assert vision_turn(seeing_model, settings) == chat, name
        assert batch_sequence(seeing_model, settings) == chat, name


def test_the_penalties_change_the_tokens_sampled(seeing_model: LoadedModel) -> None:
    replies = {name: chat_turn(seeing_model, s) for name, s in SETTINGS.items()}
    assert len(set(replies.values())) == 3, replies
    with_image = {name: image_turn(seeing_model, s) for name, s in SETTINGS.items()}
    assert len(set(with_image.values())) == 3, with_image


def test_the_settings_seed_makes_a_reply_reproducible(seeing_model: LoadedModel) -> None:
    again = chat_turn(seeing_model, SEEDED)
    assert again == chat_turn(seeing_model, SEEDED)
    assert again != chat_turn(seeing_model, SEEDED.with_changes(seed=8))
