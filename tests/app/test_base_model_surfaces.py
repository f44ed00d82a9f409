"""Where a base model says so: `info`, `models list`, the model manager's facts, the model line.

The files are the Gemma-vocabulary synthetic model with Gemma 3 270M's general.* keys
(base) and its -it model's (tests/purpose_models.py); the model line is checked on the
window's state object with the events the worker sends.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import CliRun

from app.conversation.model_status import BASE_MODEL_NOTE, ModelStatus
from app.engine_host.events import ModelLoaded, PromptFormatChosen
from app.model_lifecycle.load_planning import LoadRequest
from app.screen_text.model_summary import summarize
from app.stores.model_library import ModelLibrary
from engine.model.inventory import read_inventory
from tests.purpose_models import purpose_model

BASE_EVIDENCE = "general.basename 'gemma-3' and no general.finetune"


@pytest.fixture(scope="module")
def base_file(make_synthetic, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return purpose_model(make_synthetic, tmp_path_factory.mktemp("base"), "base")


@pytest.fixture(scope="module")
def chat_file(make_synthetic, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return purpose_model(make_synthetic, tmp_path_factory.mktemp("it"), "finetune-it")


def _said(stdout: str, label: str) -> str:
    """What `info` says on the line of `label` (its labels fill 15 columns)."""
    return next(line[15:] for line in stdout.splitlines() if line.startswith(f"{label}  "))


def test_info_says_a_base_model_gets_plain_completion(base_file: Path, shardchat: CliRun) -> None:
    done = shardchat("info", str(base_file))
    assert done.returncode == 0, done.stderr
    assert _said(done.stdout, "trained as") == f"base model ({BASE_EVIDENCE})"
    assert _said(done.stdout, "prompt format") == (
        f"completion (no chat template, and a base model ({BASE_EVIDENCE}): plain text completion)"
    )
    data = json.loads(shardchat("info", "--json", str(base_file)).stdout)
    assert data["trained_as"] == {"kind": "base", "evidence": BASE_EVIDENCE}
    assert data["prompt_format"]["kind"] == "completion"
    asked = shardchat("info", "--prompt-format", "gemma", str(base_file)).stdout
    assert _said(asked, "prompt format") == "gemma (llama.cpp's built-in 'gemma', as set)"


def test_info_says_a_chat_model_without_a_template_keeps_its_vocabulary_format(
    chat_file: Path, default_model_file: Path, shardchat: CliRun
) -> None:
    done = shardchat("info", str(chat_file))
    assert _said(done.stdout, "trained as") == "chat model (general.finetune is 'it')"
    assert _said(done.stdout, "prompt format").startswith(
        "gemma (no chat template, a chat model (general.finetune is 'it'); "
    )
    builtin = shardchat("info", "default").stdout
    assert _said(builtin, "trained as") == "chat model (it has a chat template)"
    assert _said(builtin, "prompt format") == "template (the model's own chat template)"


def test_the_model_list_marks_base_models(
    base_file: Path, chat_file: Path, shardchat: CliRun
) -> None:
    with ModelLibrary() as library:
        library.add(base_file)
        library.add(chat_file)
    rows = shardchat("models", "list").stdout.splitlines()
    base_row = next(row for row in rows if base_file.name in row)
    assert base_row.endswith(f"{base_file.name}  [{BASE_MODEL_NOTE}]")
    assert not any("base model" in row for row in rows if row != base_row)
    listed = json.loads(shardchat("models", "list", "--json").stdout)["models"]
    trained = {Path(m["path"]).name: m["trained_as"] for m in listed}
    assert trained[base_file.name] == "base" and trained[chat_file.name] == "chat"
    assert next(m for m in listed if m["builtin"])["trained_as"] == "chat"
    with ModelLibrary() as library:
        library.set_prompt_format(base_file, "gemma")  # the setting wins, and the list says so
    rows = shardchat("models", "list").stdout.splitlines()
    assert next(row for row in rows if base_file.name in row).endswith("[base model]")


def test_the_model_manager_facts_say_what_it_was_trained_as(
    base_file: Path, chat_file: Path
) -> None:
    assert dict(summarize(read_inventory(base_file)).facts())["Trained as"] == (
        f"base model ({BASE_EVIDENCE})"
    )
    assert dict(summarize(read_inventory(chat_file)).facts())["Trained as"] == (
        "chat model (general.finetune is 'it')"
    )


def _loaded(model: ModelStatus, base_model: bool, prompt_format: str) -> None:
    model.request_id = 1
    assert model.loaded(
        ModelLoaded(
            request_id=1, model_path=model.model_path, model_name="Gemma 3 270m",
            architecture="gemma3", n_params=1, n_ctx=model.n_ctx, load_seconds=0.1,
            load_params={}, prompt_format=prompt_format, prompt_format_reason="why",
            base_model=base_model,
        )
    )  # fmt: skip


def test_the_model_line_says_base_model_and_follows_the_format() -> None:
    model = ModelStatus(LoadRequest("/m/gemma-3-270m.gguf", 1024, None))
    _loaded(model, base_model=True, prompt_format="completion")
    assert model.label == f"Gemma 3 270m · gemma3 · 1024 tokens · {BASE_MODEL_NOTE}"
    model.format_chosen(PromptFormatChosen(2, "gemma", "builtin", "as set"))
    assert model.label == "Gemma 3 270m · gemma3 · 1024 tokens · base model"
    model.format_chosen(PromptFormatChosen(3, "completion", "completion", "auto"))
    assert model.label.endswith(BASE_MODEL_NOTE)
    chat = ModelStatus(LoadRequest("/m/gemma-3-270m-it.gguf", 1024, None))
    _loaded(chat, base_model=False, prompt_format="gemma")
    assert chat.label == "Gemma 3 270m · gemma3 · 1024 tokens"
