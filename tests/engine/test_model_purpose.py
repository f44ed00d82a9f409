"""Base or chat model, from what the GGUF says; a base model gets plain completion.

The rule itself is checked on plain field values (every step of its order), then on
real files: the Gemma-vocabulary synthetic model with the general.* keys the converter
writes for Gemma 3 270M and its -it model (tests/purpose_models.py), read by the
header reader and loaded by llama.cpp.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.llama.load_params import LoadParams
from engine.model.chat_message import ChatMessage
from engine.model.model_purpose import Purpose, judge_purpose, purpose_of_file
from engine.model.prompt_format import COMPLETION_STOP, FormatKind
from engine.runtime.loaded_model import LoadedModel, load_model, prompt_format_of_file
from tests.purpose_models import purpose_model

GEMMA_PARTS = {"general.name": "Gemma 3 270m", "general.basename": "gemma-3"}


@pytest.mark.parametrize(
    ("has_template", "fields", "purpose", "evidence"),
    [
        # 1. a template, whatever the name says (Qwen2.5's base model ships one)
        (True, {**GEMMA_PARTS, "general.finetune": "pt"}, Purpose.CHAT, "it has a chat template"),
        # 2. the finetune, then the tags
        (False, {**GEMMA_PARTS, "general.finetune": "it"}, Purpose.CHAT,
         "general.finetune is 'it'"),
        (False, {"general.finetune": "Instruct-2507"}, Purpose.CHAT,
         "general.finetune is 'Instruct-2507'"),
        (False, {"general.finetune": "pt-qat", "general.name": "x-it"}, Purpose.BASE,
         "general.finetune is 'pt-qat'"),
        (False, {"general.finetune": "base-sft"}, Purpose.CHAT, "general.finetune is 'base-sft'"),
        (False, {**GEMMA_PARTS, "general.tags": ["gemma3", "conversational"]}, Purpose.CHAT,
         "general.tags holds 'conversational'"),
        (False, {"general.tags": ["Base"], "general.name": "Llama 3 8B Instruct"}, Purpose.BASE,
         "general.tags holds 'Base'"),
        # 3. the name's words, then the basename's
        (False, {"general.name": "Gemma 3 270m It"}, Purpose.CHAT,
         "general.name 'Gemma 3 270m It' says 'it'"),
        (False, {"general.name": "Qwen2.5-7B-Base"}, Purpose.BASE,
         "general.name 'Qwen2.5-7B-Base' says 'base'"),
        (False, {"general.name": "m", "general.basename": "SmolLM2-chat"}, Purpose.CHAT,
         "general.basename 'SmolLM2-chat' says 'chat'"),
        # 4. a name parsed into parts with no finetune part: the base model
        (False, GEMMA_PARTS, Purpose.BASE, "general.basename 'gemma-3' and no general.finetune"),
        (False, {"general.size_label": "8B"}, Purpose.BASE,
         "general.size_label '8B' and no general.finetune"),
        # otherwise not stated: a finetune that names no purpose, a name alone, hostile values
        (False, {**GEMMA_PARTS, "general.finetune": "abliterated"}, Purpose.UNSTATED, None),
        (False, {"general.name": "teknium_openhermes-2.5-mistral-7b"}, Purpose.UNSTATED, None),
        (False, {"general.tags": ["base_model:finetune:google/gemma-3-270m"]}, Purpose.UNSTATED,
         None),
        (False, {"general.finetune": 7, "general.tags": "instruct", "general.basename": [1]},
         Purpose.UNSTATED, None),
        (False, {}, Purpose.UNSTATED, None),
    ],
)  # fmt: skip
def test_the_rule_takes_the_first_evidence_that_speaks(
    has_template: bool, fields: dict[str, object], purpose: Purpose, evidence: str | None
) -> None:
    judged = judge_purpose(has_template, fields)
    assert judged.purpose is purpose
    if evidence is not None:
        assert judged.evidence == evidence
    assert judged.is_base == (purpose is Purpose.BASE)


def test_descriptions_say_what_was_judged_and_on_what() -> None:
    assert judge_purpose(False, GEMMA_PARTS).describe() == (
        "base model (general.basename 'gemma-3' and no general.finetune)"
    )
    assert judge_purpose(True, {}).describe() == "chat model (it has a chat template)"
    assert judge_purpose(False, {}).describe() == (
        "not stated (no chat template, and no finetune, tag or name says base or chat; "
        "treated as a chat model)"
    )
    long_name = "Gemma " + "x" * 200 + " it"
    assert len(judge_purpose(False, {"general.name": long_name}).evidence) < 100


@pytest.fixture(scope="module")
def model_files(make_synthetic, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("purpose")
    kinds = ("base", "finetune-it", "tagged-instruct", "name-only")
    return {kind: purpose_model(make_synthetic, folder, kind) for kind in kinds}


def _load(path: Path, prompt_format: str = "auto") -> LoadedModel:
    return load_model(LoadParams(str(path), n_ctx=256, n_threads=2), prompt_format)


def test_a_base_model_file_gets_plain_completion(model_files: dict[str, Path]) -> None:
    path = model_files["base"]
    assert purpose_of_file(path).purpose is Purpose.BASE
    chosen = prompt_format_of_file(path)
    assert (chosen.name, chosen.kind) == ("completion", FormatKind.COMPLETION)
    assert chosen.reason == (
        "no chat template, and a base model (general.basename 'gemma-3' and no "
        "general.finetune): plain text completion"
    )
    model = _load(path)
    try:
        assert model.purpose.is_base
        assert model.prompt_format == chosen  # loading decides as `info` does
        conversation = [
            ChatMessage("user", "The capital of France is"),
            ChatMessage("assistant", "Paris."),
            ChatMessage("user", "And of Italy?"),
        ]
        rendered = model.chat_template.render(conversation)
        assert rendered.text == (
            "User: The capital of France is\n\nAssistant: Paris.\n\nUser: And of Italy?\n\n"
            "Assistant:"
        )
        assert "<start_of_turn>" not in rendered.text and rendered.stop == COMPLETION_STOP
        assert model.use_prompt_format("auto").kind is FormatKind.COMPLETION  # auto stays so
    finally:
        model.close()


@pytest.mark.parametrize("kind", ["finetune-it", "tagged-instruct"])
def test_a_chat_model_without_a_template_keeps_its_vocabulary_format(
    kind: str, model_files: dict[str, Path]
) -> None:
    path = model_files[kind]
    assert purpose_of_file(path).purpose is Purpose.CHAT
    chosen = prompt_format_of_file(path)
    assert (chosen.name, chosen.kind) == ("gemma", FormatKind.BUILTIN)
    assert chosen.reason.startswith("no chat template, a chat model (general.")
    assert chosen.reason.endswith("has <start_of_turn>/<end_of_turn>: Gemma's format")


def test_a_file_that_does_not_say_keeps_the_vocabulary_rule(model_files: dict[str, Path]) -> None:
    path = model_files["name-only"]
    assert purpose_of_file(path).purpose is Purpose.UNSTATED
    chosen = prompt_format_of_file(path)
    assert chosen.name == "gemma"
    assert chosen.reason.startswith("no chat template; the vocabulary has ")


def test_a_format_asked_for_wins_over_the_base_model_rule(model_files: dict[str, Path]) -> None:
    path = model_files["base"]
    assert prompt_format_of_file(path, "gemma").reason == "llama.cpp's built-in 'gemma', as set"
    model = _load(path, prompt_format="gemma")
    try:
        assert model.prompt_format.name == "gemma"
        assert "<start_of_turn>" in model.chat_template.render([ChatMessage("user", "Hi")]).text
    finally:
        model.close()


def test_the_default_model_stays_a_chat_model(
    default_model: LoadedModel, default_model_file: Path
) -> None:
    purpose = purpose_of_file(default_model_file)
    assert purpose.describe() == "chat model (it has a chat template)"
    assert default_model.purpose == purpose
    assert default_model.prompt_format.name == "template"
