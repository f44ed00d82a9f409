"""Reasoning models' thinking: split from the answer as it streams, kept out of later
prompts unless the template reads it, and the template's think / don't think switch."""

from __future__ import annotations

import pytest

from engine.generation.sampling import GREEDY
from engine.generation.stats import FinishReason
from engine.generation.thinking import SplitText, ThinkingSplitter, split_whole
from engine.model.chat_message import ChatMessage
from engine.model.chat_template import CHATML_TEMPLATE, ChatTemplate
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import LoadedModel

SHORT = GREEDY.with_changes(max_tokens=16)

REPLY = "<think>\nThe user greets me. I greet back.\n</think>\n\nHello! How can I help?"
THOUGHT = "The user greets me. I greet back."
ANSWER = "Hello! How can I help?"

# Qwen3's own template, shortened to what matters here: assistant turns before the
# last user message lose their thinking, and enable_thinking=false closes an empty one.
QWEN3_STYLE_TEMPLATE = """
{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(last_query_index=messages|length - 1) %}
{%- for message in messages %}
    {%- if message.role == 'user' %}{%- set ns.last_query_index = loop.index0 %}{%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == 'user' %}
        {{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set reasoning_content = message.reasoning_content or '' %}
        {%- if loop.index0 > ns.last_query_index and reasoning_content %}
            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning_content + '\\n</think>\\n\\n' }}
            {{- message.content + '<|im_end|>\\n' }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + message.content + '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

# DeepSeek-R1 distills (and Qwen3's thinking-only models) open the thinking in the
# generation prompt; this one also has the switch, which closes it at once.
OPENS_THINKING_TEMPLATE = CHATML_TEMPLATE.replace(
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and not enable_thinking %}"
    "{{ '<think>\n\n</think>\n\n' }}{% else %}{{ '<think>\n' }}{% endif %}{% endif %}",
)

# A template that shows earlier turns' thinking, read from reasoning_content.
SHOWS_REASONING_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message.reasoning_content %}"
    "{{ '<think>' + message.reasoning_content + '</think>' }}{% endif %}"
    "{{ message['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n<think>\n' }}{% endif %}"
)


def split_pieces(pieces: list[str], prompt_text: str = "") -> tuple[list[SplitText], SplitText]:
    """Every piece's split, and the thinking and the answer joined."""
    splitter = ThinkingSplitter.after(prompt_text)
    parts = [splitter.feed(piece) for piece in pieces] + [splitter.finish()]
    joined = SplitText(
        "".join(part.thinking for part in parts), "".join(part.answer for part in parts)
    )
    return parts, joined


@pytest.mark.parametrize("cut", range(1, len(REPLY)))
def test_a_tag_cut_anywhere_between_two_pieces_still_splits(cut: int) -> None:
    _, joined = split_pieces([REPLY[:cut], REPLY[cut:]])
    assert joined == SplitText(THOUGHT, ANSWER)


def test_one_character_at_a_time_splits_and_no_tag_text_leaks() -> None:
    parts, joined = split_pieces(list(REPLY))
    assert joined == SplitText(THOUGHT, ANSWER)
    assert not any("<" in part.thinking or "<" in part.answer for part in parts)


def test_the_default_models_own_tokens_split_at_their_boundaries(
    default_model: LoadedModel,
) -> None:
    llm = default_model.llm
    tokens = llm.tokenize(REPLY.encode(), add_bos=False, special=False)
    pieces = [llm.detokenize([token]).decode() for token in tokens]
    assert len(pieces) > 10 and "<think>" not in pieces  # the tags are cut across tokens
    assert split_pieces(pieces)[1] == SplitText(THOUGHT, ANSWER)


def test_a_prompt_that_opens_the_thinking_starts_the_reply_inside_it() -> None:
    pieces = ["\nI should ", "greet.\n</th", "ink>\n", "\nHi", " there."]
    _, joined = split_pieces(pieces, "<|im_start|>assistant\n<think>\n")
    assert joined == SplitText("I should greet.", "Hi there.")
    _, plain = split_pieces(pieces, "<|im_start|>assistant\n")
    assert plain == SplitText("", "".join(pieces))  # no tag opened: all of it is answer


def test_thinking_cut_short_stays_thinking_and_a_partial_tag_with_it() -> None:
    _, joined = split_pieces(["<think>I am still", " thinking </thi"])
    assert joined == SplitText("I am still thinking </thi", "")


def test_a_tag_inside_the_answer_is_answer_text() -> None:
    assert split_whole("Use <think> tags.") == SplitText("", "Use <think> tags.")
    assert split_whole("<b>bold</b>") == SplitText("", "<b>bold</b>")
    assert split_whole("<thinking>hm</thinking> Yes.") == SplitText("hm", "Yes.")


def test_a_switched_off_thinking_closed_in_the_prompt_leaves_only_the_answer() -> None:
    prompt = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert split_whole("Hello.", prompt) == SplitText("", "Hello.")


def test_the_qwen3_style_switch_reaches_the_render() -> None:
    template = ChatTemplate(QWEN3_STYLE_TEMPLATE, "", "<|im_end|>")
    messages = [ChatMessage("user", "Hi")]
    assert template.has_thinking_switch
    assert not ChatTemplate(None, "", "<|im_end|>").has_thinking_switch
    default = template.render(messages).text
    assert default.endswith("<|im_start|>assistant\n")
    assert template.render(messages, enable_thinking=True).text == default
    off = template.render(messages, enable_thinking=False).text
    assert off == default + "<think>\n\n</think>\n\n"


def test_the_qwen3_style_template_leaves_earlier_thinking_out() -> None:
    template = ChatTemplate(QWEN3_STYLE_TEMPLATE, "", "<|im_end|>")
    answered = ChatMessage("assistant", "Hello!", thinking="a secret plan")
    text = template.render([ChatMessage("user", "Hi"), answered, ChatMessage("user", "And?")]).text
    assert "Hello!" in text and "a secret plan" not in text


def with_template(model: LoadedModel, source: str, monkeypatch: pytest.MonkeyPatch) -> ChatSession:
    """A session on the model as if its GGUF shipped this template."""
    monkeypatch.setattr(model, "chat_template", ChatTemplate(source, "", "<|im_end|>"))
    return ChatSession(model)


def test_a_reply_in_an_opened_thinking_streams_as_thinking_and_leaves_the_history(
    default_model: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = with_template(default_model, OPENS_THINKING_TEMPLATE, monkeypatch)
    thought: list[str] = []
    answer: list[str] = []
    reply = session.reply("Hi!", SHORT, on_text=answer.append, on_thinking=thought.append)
    assert reply.finish_reason is FinishReason.LENGTH  # the small model never closes it
    assert reply.text == "" and answer == []
    assert reply.thinking and "".join(thought) == reply.thinking
    last = session.messages[-1]
    assert (last.role, last.content, last.thinking) == ("assistant", "", reply.thinking)
    # the template does not read reasoning_content: the next prompt has no thinking
    second = session.reply("And then?", SHORT)
    plain = [ChatMessage(m.role, m.content) for m in session.messages[:-1]]
    assert second.stats.prompt_tokens == default_model.count_tokens(plain)


def test_a_template_that_reads_reasoning_content_gets_the_earlier_thinking(
    default_model: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = with_template(default_model, SHOWS_REASONING_TEMPLATE, monkeypatch)
    first = session.reply("Hi!", SHORT)
    assert first.thinking
    second = session.reply("And then?", SHORT)
    history = session.messages[:-1]
    without = [ChatMessage(m.role, m.content) for m in history]
    assert second.stats.prompt_tokens == default_model.count_tokens(history)
    assert default_model.count_tokens(without) < default_model.count_tokens(history)


def test_the_think_switch_turns_the_opened_thinking_off(
    default_model: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    thinking = with_template(default_model, OPENS_THINKING_TEMPLATE, monkeypatch)
    assert thinking.has_thinking_switch
    on = thinking.reply("Hi!", SHORT, thinking=True)
    assert on.thinking and not on.text
    off = ChatSession(default_model).reply("Hi!", SHORT, thinking=False)
    assert off.text and not off.thinking


def test_a_template_without_the_switch_ignores_it(default_model: LoadedModel) -> None:
    session = ChatSession(default_model)
    assert not session.has_thinking_switch
    reply = session.reply("Hi!", SHORT, thinking=False)
    assert reply.text and not reply.thinking
    assert ChatSession(default_model).reply("Hi!", SHORT, thinking=True).text == reply.text
