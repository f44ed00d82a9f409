"""Tool calls read back from model text, whole and streamed, and forced by a grammar.

Replies are written the way each family's models write them; templates are short
excerpts of the real Qwen 2.5, Llama 3.1/3.2 and Mistral tool templates, plus the
default model's own template read from its GGUF. Grammars are parsed by llama.cpp
itself, against the default model's vocabulary, and walked token by token through
llama.cpp's grammar sampler to see which texts they let a model write.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import llama_cpp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.tool_calls import (
    ToolCall,
    ToolCallFormat,
    ToolCallStream,
    format_for_template,
    parse_tool_calls,
    tool_call_grammar,
)
from engine.llama import log_capture

pytestmark = pytest.mark.usefixtures("ggml_started")  # it builds Llama() itself

HERMES, LLAMA3, MISTRAL = ToolCallFormat.HERMES, ToolCallFormat.LLAMA3, ToolCallFormat.MISTRAL

WEATHER_HERMES = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
)
TIME_HERMES = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>'


def named(calls: list[ToolCall]) -> list[tuple[str, Any]]:
    return [(call.name, json.loads(call.arguments)) for call in calls]


# --- parsing whole replies ------------------------------------------------------------


def test_hermes_call_after_content() -> None:
    content, calls = parse_tool_calls("Let me look that up.\n" + WEATHER_HERMES, HERMES)
    assert content == "Let me look that up."
    assert named(calls) == [("get_weather", {"city": "Paris"})]


def test_hermes_several_calls_and_the_text_between_them() -> None:
    text = f"{WEATHER_HERMES}\nand also\n{TIME_HERMES}\n"
    content, calls = parse_tool_calls(text, HERMES)
    assert content == "and also"
    assert named(calls) == [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})]


def test_hermes_invalid_json_stays_content_and_a_valid_call_beside_it_is_read() -> None:
    broken = '<tool_call>\n{"name": "get_weather", "arguments": {"city": Paris}}\n</tool_call>'
    content, calls = parse_tool_calls(f"{broken}\n{TIME_HERMES}", HERMES)
    assert content == broken
    assert named(calls) == [("get_time", {"zone": "CET"})]


def test_hermes_call_not_closed_before_the_stop_token_is_still_read() -> None:
    content, calls = parse_tool_calls(WEATHER_HERMES.removesuffix("</tool_call>"), HERMES)
    assert content == ""
    assert named(calls) == [("get_weather", {"city": "Paris"})]


def test_hermes_json_without_a_name_is_not_a_call() -> None:
    text = '<tool_call>\n{"arguments": {"city": "Paris"}}\n</tool_call>'
    assert parse_tool_calls(text, HERMES) == (text, [])


def test_arguments_written_as_a_json_string_are_read_as_the_object() -> None:
    text = '<tool_call>{"name": "f", "arguments": "{\\"x\\": [1, 2]}"}</tool_call>'
    assert named(parse_tool_calls(text, HERMES)[1]) == [("f", {"x": [1, 2]})]


def test_arguments_are_compact_json_with_text_kept_readable() -> None:
    text = '<tool_call>{"name": "f", "arguments": {"city": "Zürich", "days": [1, 2]}}</tool_call>'
    [call] = parse_tool_calls(text, HERMES)[1]
    assert call.arguments == '{"city":"Zürich","days":[1,2]}'


def test_call_ids_look_like_openai_ids_and_differ() -> None:
    calls = parse_tool_calls(WEATHER_HERMES + WEATHER_HERMES, HERMES)[1]
    assert all(re.fullmatch(r"call_[A-Za-z0-9]{24}", call.id) for call in calls)
    assert calls[0].id != calls[1].id


@pytest.mark.parametrize(
    "reply",
    [
        '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
        '\n {"name": "get_weather", "arguments": {"city": "Paris"}} \n',
    ],
)
def test_llama3_reply_that_is_one_call(reply: str) -> None:
    assert parse_tool_calls(reply, LLAMA3)[0] == ""
    assert named(parse_tool_calls(reply, LLAMA3)[1]) == [("get_weather", {"city": "Paris"})]


def test_llama3_calls_separated_by_semicolons() -> None:
    reply = '{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}};'
    assert parse_tool_calls(reply, LLAMA3)[0] == ""
    assert named(parse_tool_calls(reply, LLAMA3)[1]) == [("a", {"x": 1}), ("b", {})]


@pytest.mark.parametrize(
    "reply",
    [
        'I would call {"name": "a", "parameters": {}} for that.',
        '{"name": "a", "parameters": {"x": 1}',
        '{"name": "a", "parameters": {}} and then some words',
        '{"answer": 42}',
        "<|python_tag|>brave_search.call(query='weather')",
    ],
)
def test_llama3_reply_that_is_not_only_calls_is_content(reply: str) -> None:
    assert parse_tool_calls(reply, LLAMA3) == (reply.strip(), [])


def test_mistral_calls_in_one_array_after_content() -> None:
    reply = (
        'Checking both.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, '
        '{"name": "get_time", "arguments": {"zone": "CET"}}]'
    )
    content, calls = parse_tool_calls(reply, MISTRAL)
    assert content == "Checking both."
    assert named(calls) == [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})]


@pytest.mark.parametrize(
    "reply",
    [
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{"zone": "CET"}',
        '[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}'
        '[TOOL_CALLS]get_time[CALL_ID]f5g6h7i8j[ARGS]{"zone": "CET"}',
    ],
)
def test_mistral_named_calls(reply: str) -> None:
    content, calls = parse_tool_calls(reply, MISTRAL)
    assert content == ""
    assert named(calls) == [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})]


@pytest.mark.parametrize(
    "reply",
    [
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}',
        '[TOOL_CALLS]get_weather[ARGS]{"city": Paris}',
        '[TOOL_CALLS][{"name": "get_weather"}, "not a call"]',
    ],
)
def test_mistral_invalid_calls_stay_content(reply: str) -> None:
    assert parse_tool_calls("Here: " + reply, MISTRAL) == ("Here: " + reply, [])


# --- streaming ------------------------------------------------------------------------

STREAMED_REPLIES = [
    (HERMES, "Let me look that up.\n" + WEATHER_HERMES),
    (HERMES, f"  \n{WEATHER_HERMES}\nand also\n{TIME_HERMES}\n"),
    (HERMES, '<tool_call>\n{"name": "f", "arguments": {oops}}\n</tool_call> sorry'),
    (HERMES, "Use <b>bold</b> or a < sign; <tool> is not <tool_call"),
    (HERMES, "No tools needed.  \n"),
    (LLAMA3, '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    (LLAMA3, '{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}'),
    (LLAMA3, '{"answer": 42}'),
    (LLAMA3, "The set {1, 2} has <b>two</b> members.\n"),
    (LLAMA3, "<|python_tag|>print('hi')"),
    (MISTRAL, 'Checking.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
    (MISTRAL, '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]now[ARGS]{}'),
    (MISTRAL, "[1, 2] is a list, [TOOL] is not a call [TOOL_CALLS][{broken"),
]


def streamed(fmt: ToolCallFormat, pieces: list[str]) -> tuple[str, list[ToolCall]]:
    stream = ToolCallStream(fmt)
    shown = "".join(stream.feed(piece) for piece in pieces)
    rest, calls = stream.finish()
    return shown + rest, calls


@pytest.mark.parametrize(("fmt", "reply"), STREAMED_REPLIES)
def test_streaming_one_character_at_a_time_matches_parsing_the_whole(
    fmt: ToolCallFormat, reply: str
) -> None:
    content, calls = streamed(fmt, list(reply))
    expected_content, expected_calls = parse_tool_calls(reply, fmt)
    assert content == expected_content
    assert named(calls) == named(expected_calls)


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=12))
@pytest.mark.parametrize(("fmt", "reply"), STREAMED_REPLIES)
def test_streaming_in_any_chunks_matches_parsing_the_whole(
    fmt: ToolCallFormat, reply: str, cuts: list[int]
) -> None:
    bounds = [0, *sorted(cut % (len(reply) + 1) for cut in cuts), len(reply)]
    pieces = [reply[start:end] for start, end in pairwise(bounds)]
    content, calls = streamed(fmt, pieces)
    expected_content, expected_calls = parse_tool_calls(reply, fmt)
    assert content == expected_content
    assert named(calls) == named(expected_calls)


def shown_while_streaming(fmt: ToolCallFormat, reply: str) -> list[str]:
    """What the stream has shown after each character."""
    stream = ToolCallStream(fmt)
    shown = ""
    progress = []
    for character in reply:
        shown += stream.feed(character)
        progress.append(shown)
    return progress


def test_hermes_streams_text_up_to_the_call_and_nothing_of_the_call() -> None:
    progress = shown_while_streaming(HERMES, "Looking it up.\n" + WEATHER_HERMES)
    assert set(progress[len("Looking it up.") - 1 :]) == {"Looking it up."}


@pytest.mark.parametrize(
    ("fmt", "reply"),
    [
        (HERMES, "<b>Bold</b> and <tool>, <tool_cal!"),
        (MISTRAL, "[1, 2] and [TOOL] and [TOOL_CALL!"),
        (LLAMA3, "<b>Bold</b> {braces} [1, 2]."),
        (LLAMA3, "[1, 2] is a list."),
    ],
)
def test_text_opening_with_a_bracket_that_opens_no_call_is_streamed(
    fmt: ToolCallFormat, reply: str
) -> None:
    assert shown_while_streaming(fmt, reply)[-1] == reply


def test_a_possible_opener_is_held_only_until_it_is_clearly_not_one() -> None:
    progress = shown_while_streaming(HERMES, "a <tool_x")
    assert progress[len("a <tool_") - 1] == "a"
    assert progress[-1] == "a <tool_x"


@pytest.mark.parametrize("start", ['{"name"', "<|python_tag|>x"])
def test_llama3_holds_a_reply_that_may_be_a_call(start: str) -> None:
    assert shown_while_streaming(LLAMA3, start + " and much more text")[-1] == ""


def test_llama3_holds_a_possible_python_tag_until_it_is_clearly_not_one() -> None:
    progress = shown_while_streaming(LLAMA3, "<|python! Snakes.")
    assert progress[len("<|python") - 1] == ""
    assert progress[-1] == "<|python! Snakes."


# --- which format a template teaches ----------------------------------------------------

QWEN25_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
{%- endif %}"""  # noqa: E501

LLAMA31_TEMPLATE = r"""{{- bos_token }}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
{%- endif %}
{%- for message in messages %}
    {%- if 'tool_calls' in message %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
        {%- endif %}
    {%- endif %}
{%- endfor %}"""  # noqa: E501

LLAMA32_TEMPLATE = r"""{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
{%- endif %}"""  # noqa: E501

MISTRAL_TEMPLATE = r"""{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {{- "[INST] " + message["content"] + "[/INST]" }}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {{- '{"name": "' + tool_call.function.name + '", "arguments": ' }}
        {%- endfor %}
    {%- endif %}
{%- endfor %}"""

LLAMA3_WITHOUT_TOOLS = r"""{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"""  # noqa: E501


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (QWEN25_TEMPLATE, HERMES),
        (LLAMA31_TEMPLATE, LLAMA3),
        (LLAMA32_TEMPLATE, LLAMA3),
        (MISTRAL_TEMPLATE, MISTRAL),
        (LLAMA3_WITHOUT_TOOLS, None),
        (QWEN25_TEMPLATE.replace("tools", "functions"), None),
        ("{%- if tools %}{{ tools | tojson }}{% endif %}{{ messages[0].content }}", None),
        ("", None),
        (None, None),
    ],
)
def test_format_for_template(template: str | None, expected: ToolCallFormat | None) -> None:
    assert format_for_template(template) is expected


def test_default_models_template_renders_no_tools(default_model_file: Path) -> None:
    model = llama_cpp.Llama(model_path=str(default_model_file), vocab_only=True, verbose=False)
    template = model.metadata["tokenizer.chat_template"]
    assert "<|im_start|>" in template
    assert format_for_template(template) is None


# --- grammars that force one call -------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "description": "Now"}}


@pytest.fixture(scope="module")
def vocab(default_model_file: Path) -> Iterator[llama_cpp.llama_vocab_p]:
    log_capture.install()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(os.fsencode(default_model_file), params)
    assert model
    yield llama_cpp.llama_model_get_vocab(model)
    llama_cpp.llama_model_free(model)


def grammar_allows(vocab: llama_cpp.llama_vocab_p, grammar: str, text: str) -> bool:
    """Whether llama.cpp's grammar sampler lets a model write exactly `text`, then stop."""
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    assert sampler, f"llama.cpp could not parse the grammar:\n{grammar}"
    try:
        encoded = text.encode()
        tokens = (llama_cpp.llama_token * (len(encoded) + 1))()
        count = llama_cpp.llama_tokenize(
            vocab, encoded, len(encoded), tokens, len(tokens), False, False
        )
        for token in [*tokens[:count], llama_cpp.llama_vocab_eos(vocab)]:
            candidate = (llama_cpp.llama_token_data * 1)(
                llama_cpp.llama_token_data(token, 0.0, 0.0)
            )
            candidates = llama_cpp.llama_token_data_array(candidate, 1, -1, False)
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(candidates))
            if candidates.data[0].logit == float("-inf"):
                return False
            llama_cpp.llama_sampler_accept(sampler, token)
        return True
    finally:
        llama_cpp.llama_sampler_free(sampler)


FORCED_CALLS = {
    HERMES: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    LLAMA3: '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    MISTRAL: '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
}


@pytest.mark.parametrize("fmt", list(ToolCallFormat))
def test_grammar_lets_the_model_write_one_call_in_its_markup(
    vocab: llama_cpp.llama_vocab_p, fmt: ToolCallFormat
) -> None:
    grammar = tool_call_grammar([WEATHER_TOOL, TIME_TOOL], fmt)
    forced = FORCED_CALLS[fmt]
    assert grammar_allows(vocab, grammar, forced)
    assert named(parse_tool_calls(forced, fmt)[1]) == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("fmt", list(ToolCallFormat))
def test_grammar_refuses_anything_but_one_valid_call(
    vocab: llama_cpp.llama_vocab_p, fmt: ToolCallFormat
) -> None:
    grammar = tool_call_grammar([WEATHER_TOOL, TIME_TOOL], fmt)
    forced = FORCED_CALLS[fmt]
    assert not grammar_allows(vocab, grammar, "The weather in Paris is mild.")
    assert not grammar_allows(vocab, grammar, forced.replace("get_weather", "get_news"))
    assert not grammar_allows(vocab, grammar, forced.replace('"city"', '"town"'))
    assert not grammar_allows(vocab, grammar, forced + forced)


def test_grammar_follows_each_tools_parameters(vocab: llama_cpp.llama_vocab_p) -> None:
    grammar = tool_call_grammar([WEATHER_TOOL, TIME_TOOL], HERMES)
    call = '<tool_call>\n{{"name": "{}", "arguments": {}}}\n</tool_call>'
    assert grammar_allows(vocab, grammar, call.format("get_time", "{}"))
    assert grammar_allows(
        vocab, grammar, call.format("get_weather", '{"city": "Oslo", "unit": "celsius"}')
    )
    assert not grammar_allows(vocab, grammar, call.format("get_weather", '{"unit": "celsius"}'))
    assert not grammar_allows(
        vocab, grammar, call.format("get_weather", '{"city": "Oslo", "unit": "kelvin"}')
    )
    assert not grammar_allows(vocab, grammar, call.format("get_time", '{"zone": "CET"}'))


def test_grammar_for_a_named_function_allows_only_that_one(vocab: llama_cpp.llama_vocab_p) -> None:
    grammar = tool_call_grammar([WEATHER_TOOL, TIME_TOOL], HERMES, required_name="get_time")
    assert grammar_allows(
        vocab, grammar, '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    )
    assert not grammar_allows(vocab, grammar, FORCED_CALLS[HERMES])


def test_grammar_resolves_each_tools_own_definitions(vocab: llama_cpp.llama_vocab_p) -> None:
    """Two tools written by pydantic, each with its own `$defs` entry named `Place`."""

    def tool(name: str, place: dict[str, Any]) -> dict[str, Any]:
        parameters = {
            "type": "object",
            "properties": {"place": {"$ref": "#/$defs/Place"}},
            "required": ["place"],
            "$defs": {"Place": place},
        }
        return {"type": "function", "function": {"name": name, "parameters": parameters}}

    city = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    point = {
        "type": "object",
        "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
        "required": ["lat", "lon"],
    }
    grammar = tool_call_grammar([tool("by_city", city), tool("by_point", point)], LLAMA3)
    assert grammar_allows(
        vocab, grammar, '{"name": "by_city", "parameters": {"place": {"city": "Rome"}}}'
    )
    assert grammar_allows(
        vocab, grammar, '{"name": "by_point", "parameters": {"place": {"lat": 41.9, "lon": 12.5}}}'
    )
    assert not grammar_allows(
        vocab, grammar, '{"name": "by_point", "parameters": {"place": {"city": "Rome"}}}'
    )


def test_unsupported_schema_feature_is_a_one_line_value_error() -> None:
    negated = {
        "type": "function",
        "function": {
            "name": "pick",
            "parameters": {
                "type": "object",
                "properties": {"choice": {"not": {"type": "string"}}},
            },
        },
    }
    with pytest.raises(ValueError, match="cannot be enforced by a grammar") as raised:
        tool_call_grammar([WEATHER_TOOL, negated], HERMES)
    assert "\n" not in str(raised.value)


def test_required_name_that_no_tool_has_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="get_news"):
        tool_call_grammar([WEATHER_TOOL], MISTRAL, required_name="get_news")
