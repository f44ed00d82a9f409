"""The prompt format: the GGUF's template, else its vocabulary's family, else plain completion.

Synthetic models copy the default model's real tokenizer, add a family's turn markers as
control tokens and carry no chat template (tests/synthetic_vocab.py); llama.cpp loads
each, so the choice, the rendered prompt, its tokens and a short greedy reply are all real.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import BadInputError
from engine.generation.sampling import SamplingSettings
from engine.llama.load_params import LoadParams
from engine.model.chat_message import MEDIA_MARKER, ChatMessage
from engine.model.chat_template import ChatTemplate
from engine.model.image_input import ImageFile
from engine.model.prompt_format import (
    COMPLETION_STOP,
    VOCABULARY_FAMILIES,
    FormatKind,
    builtin_template_names,
    family_named,
    format_choices,
)
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import LoadedModel, load_model, prompt_format_of_file
from tests.synthetic_vocab import marker_vocabulary

GREEDY_FOUR = SamplingSettings(temperature=0.0, max_tokens=4)
# The families the issue names, each loaded, rendered and run.
LOADED_FAMILIES = ("gemma", "chatml", "llama3", "mistral-v3", "phi3", "deepseek3")
HOSTILE_TEMPLATES = (
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.system('touch {canary}') }}",
    "{% for m in messages %}{{ m.__class__.__init__.__globals__['os'].system('touch {canary}') }}"
    "{% endfor %}",
)


@pytest.fixture(scope="session")
def make_vocab_model(make_synthetic):
    """A tiny llama model whose vocabulary holds these markers and no chat template."""

    def make(markers: tuple[str, ...], **fields: object) -> Path:
        return make_synthetic("llama", **{**marker_vocabulary(markers), **fields})

    return make


def _load(path: Path, prompt_format: str = "auto") -> LoadedModel:
    return load_model(LoadParams(str(path), n_ctx=256, n_threads=2), prompt_format)


def _token_count(model: LoadedModel, text: str) -> int:
    return len(model.llm.tokenize(text.encode(), add_bos=False, special=True))


@pytest.mark.parametrize("family", VOCABULARY_FAMILIES, ids=lambda f: f.builtin)
def test_every_family_is_chosen_from_its_vocabulary(family, make_vocab_model) -> None:
    chosen = prompt_format_of_file(make_vocab_model(family.markers))
    assert (chosen.name, chosen.kind) == (family.builtin, FormatKind.BUILTIN)
    assert chosen.reason.startswith("no chat template; the vocabulary has ")
    assert all(marker in chosen.reason for marker in family.markers)
    assert family.builtin in builtin_template_names()


@pytest.mark.parametrize("name", LOADED_FAMILIES)
def test_a_family_model_renders_its_markers_as_single_tokens_and_replies(
    name: str, make_vocab_model
) -> None:
    family = family_named(name)
    assert family is not None
    model = _load(make_vocab_model(family.markers))
    try:
        assert model.prompt_format.name == name
        rendered = model.chat_template.render([ChatMessage("user", "Hello there")])
        tokens = model.tokenize_prompt(rendered)
        for marker in family.markers:
            assert marker in rendered.text
            assert _token_count(model, marker) == 1
        opener = model.llm.tokenize(family.markers[0].encode(), add_bos=False, special=True)
        assert opener[0] in tokens  # the prompt holds the marker as its special token
        assert family.stop[0] in rendered.stop
        reply = ChatSession(model).reply("Hello there", GREEDY_FOUR)
        assert reply.stats.prompt_tokens == len(tokens)
        assert 1 <= reply.stats.generated_tokens <= 4
    finally:
        model.close()


def test_a_vocabulary_without_markers_gets_plain_completion(make_vocab_model) -> None:
    path = make_vocab_model(())
    model = _load(path)
    try:
        assert model.prompt_format.kind is FormatKind.COMPLETION
        assert "plain text completion" in model.prompt_format.reason
        conversation = [
            ChatMessage("system", "Be brief."),
            ChatMessage("user", "Hi"),
            ChatMessage("assistant", "Hello."),
            ChatMessage("user", "Name a colour"),
        ]
        rendered = model.chat_template.render(conversation)
        assert rendered.text == (
            "Be brief.\n\nUser: Hi\n\nAssistant: Hello.\n\nUser: Name a colour\n\nAssistant:"
        )
        assert rendered.stop == COMPLETION_STOP
        reply = ChatSession(model).reply("Name a colour", GREEDY_FOUR)
        assert 1 <= reply.stats.generated_tokens <= 4
    finally:
        model.close()
    assert prompt_format_of_file(path).kind is FormatKind.COMPLETION


def test_the_default_model_keeps_its_own_template(default_model: LoadedModel) -> None:
    chosen = default_model.prompt_format
    assert (chosen.name, chosen.kind) == ("template", FormatKind.TEMPLATE)
    assert chosen.reason == "the model's own chat template"
    rendered = default_model.chat_template.render([ChatMessage("user", "Hi")])
    assert "You are a helpful AI assistant named SmolLM" in rendered.text  # its template's own
    assert not default_model.chat_template.has_thinking_switch


def test_the_setting_switches_the_format_and_refuses_unknown_names(make_vocab_model) -> None:
    gemma = family_named("gemma")
    assert gemma is not None
    model = _load(make_vocab_model(gemma.markers), prompt_format="chatml")
    try:
        assert model.prompt_format.name == "chatml"
        assert "<|im_start|>" in model.chat_template.render([ChatMessage("user", "Hi")]).text
        assert model.use_prompt_format("completion").kind is FormatKind.COMPLETION
        with pytest.raises(BadInputError, match="unknown prompt format 'gemma4'; choose auto"):
            model.use_prompt_format("gemma4")
        with pytest.raises(BadInputError, match="has no chat template of its own"):
            model.use_prompt_format("template")
        assert model.prompt_format.kind is FormatKind.COMPLETION  # a refusal changes nothing
        assert model.use_prompt_format("auto").name == "gemma"
    finally:
        model.close()
    with pytest.raises(BadInputError, match="unknown prompt format"):
        _load(make_vocab_model(gemma.markers), prompt_format="no-such-format")


@pytest.mark.parametrize("hostile", HOSTILE_TEMPLATES)
def test_a_hostile_template_stays_sandboxed(hostile: str, make_vocab_model, tmp_path) -> None:
    canary = tmp_path / "escaped"
    gemma = family_named("gemma")
    assert gemma is not None
    path = make_vocab_model(gemma.markers, chat_template=hostile.replace("{canary}", str(canary)))
    model = _load(path)
    try:
        chosen = model.prompt_format
        assert chosen.name == "gemma"
        assert chosen.reason.startswith("its chat template is unusable (SecurityError: ")
        assert "Gemma's format" in chosen.reason
        model.chat_template.render([ChatMessage("user", "Hi")])
        with pytest.raises(BadInputError, match="prompt format 'template': SecurityError"):
            model.use_prompt_format("template")
    finally:
        model.close()
    assert not canary.exists()


def test_a_template_that_escapes_only_on_some_input_is_refused_there(tmp_path) -> None:
    canary = tmp_path / "escaped"
    template = (
        "{% for m in messages %}{% if 'open sesame' in m.content %}"
        f"{{{{ cycler.__init__.__globals__.os.system('touch {canary}') }}}}"
        "{% endif %}{{ m.content }}{% endfor %}"
    )
    chat = ChatTemplate(template, "<s>", "</s>")
    assert chat.format.kind is FormatKind.TEMPLATE  # the trial render passes
    with pytest.raises(BadInputError, match="chat template refused this conversation"):
        chat.render([ChatMessage("user", "open sesame")])
    assert not canary.exists()


def test_images_media_markers_come_through_every_kind() -> None:
    image = ImageFile("cat.png", b"\x89PNG")
    message = [ChatMessage("user", "What is this?", (image,))]
    for requested in ("auto", "gemma", "completion"):
        chat = ChatTemplate(None, "<s>", "</s>", requested=requested)
        assert f"{MEDIA_MARKER}\nWhat is this?" in chat.render(message).text


def test_bos_written_by_a_builtin_is_not_added_twice() -> None:
    conversation = [ChatMessage("system", "S"), ChatMessage("user", "Hi")]
    with_bos = ChatTemplate(None, "<s>", "</s>", requested="gigachat").render(conversation)
    assert with_bos.text.startswith("<s>") and with_bos.template_adds_bos
    without = ChatTemplate(None, "<s>", "</s>", requested="gemma").render(conversation)
    assert not without.template_adds_bos


def test_enable_thinking_reaches_a_template_that_reads_it() -> None:
    template = (
        "{% for m in messages %}{{ m.content }}{% endfor %}"
        "{% if enable_thinking is defined and not enable_thinking %}<no-think>{% endif %}"
    )
    chat = ChatTemplate(template, "", "")
    assert chat.has_thinking_switch
    message = [ChatMessage("user", "Hi")]
    assert chat.render(message, enable_thinking=False).text == "Hi<no-think>"
    assert chat.render(message, enable_thinking=True).text == "Hi"
    assert chat.render(message).text == "Hi"
    assert not ChatTemplate(None, "", "").has_thinking_switch


def test_format_choices_list_the_template_only_for_a_model_with_one() -> None:
    assert format_choices()[:3] == ("auto", "template", "completion")
    assert "template" not in format_choices(has_template=False)
    assert {"gemma", "chatml", "llama3", "phi3"} <= set(format_choices())


def test_a_model_without_any_tokenizer_loads_in_completion_mode(make_synthetic) -> None:
    # profiler micro-models have llama.cpp's "none" vocabulary, where llama_tokenize aborts
    path = make_synthetic("llama", vocab_size=256)
    model = _load(path)
    try:
        assert model.prompt_format.kind is FormatKind.COMPLETION
    finally:
        model.close()
    assert prompt_format_of_file(path).kind is FormatKind.COMPLETION
