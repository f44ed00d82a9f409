"""Tool calls and images through the server, on synthetic models: one whose chat template
renders tools (Qwen 2.5's way, <tool_call> JSON), and the synthetic vision pair.

A synthetic model's weights are random, so it calls a tool only when made to: tool_choice
"required" puts the call's grammar on the sampler, which is the path under test (the
parsing of each format is tested on its own in test_tool_calls).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from api_server_fixtures import Serving, start_serving
from PIL import Image

from tests.synthetic_vision import write_synthetic_vlm

TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nYou may call functions.\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n"
    "Return each call as <tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant"
    "{%- for call in message.tool_calls %}\n<tool_call>\n"
    '{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}'
    "\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n"
    "{{ message.content }}\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
                "unit": {"type": "string", "enum": ["C", "F"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Oslo?"}]


@pytest.fixture(scope="module")
def tool_serving(make_synthetic) -> Iterator[Serving]:
    model = make_synthetic("llama", "F16", chat_template=TOOLS_TEMPLATE)
    started = start_serving(str(model), n_slots=2, n_ctx_per_slot=1024)
    yield started
    started.close()


def test_a_forced_tool_call_round_trip(tool_serving: Serving) -> None:
    client = tool_serving.client()
    called = client.chat.completions.create(
        model=tool_serving.model_id, messages=ASK, tools=[WEATHER], tool_choice="required",
        temperature=0, max_tokens=200,
    )  # fmt: skip
    choice = called.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    arguments = json.loads(call.function.arguments)
    assert arguments["city"] in ("Paris", "Oslo", "Lima") and arguments["unit"] in ("C", "F")
    answered = client.chat.completions.create(
        model=tool_serving.model_id,
        messages=[
            *ASK,
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 3}'},
        ],
        tools=[WEATHER], temperature=0, max_tokens=8,
    )  # fmt: skip
    assert answered.choices[0].finish_reason in ("stop", "length")
    assert answered.usage is not None and called.usage is not None
    # the template rendered the call and its result into the second prompt
    assert answered.usage.prompt_tokens > called.usage.prompt_tokens + 20


def test_a_named_tool_call_streams_as_a_delta(tool_serving: Serving) -> None:
    other = {**WEATHER, "function": {**WEATHER["function"], "name": "get_forecast"}}
    chunks = list(
        tool_serving.client().chat.completions.create(
            model=tool_serving.model_id, messages=ASK, tools=[WEATHER, other],
            tool_choice={"type": "function", "function": {"name": "get_forecast"}},
            temperature=0, max_tokens=200, stream=True,
        )
    )  # fmt: skip
    deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
    assert [d.function.name for d in deltas] == ["get_forecast"]
    assert json.loads(deltas[0].function.arguments)["unit"] in ("C", "F")
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_forced_tool_call_through_the_responses_api(tool_serving: Serving) -> None:
    """The Responses API's flat function tools, its function_call output item (whole and
    streamed), and the call and its output sent back as input items."""
    client = tool_serving.client()
    flat = {"type": "function", **WEATHER["function"]}
    asked = {"model": tool_serving.model_id, "tools": [flat], "tool_choice": "required",
             "temperature": 0, "max_output_tokens": 200}  # fmt: skip
    called = client.responses.create(input="What is the weather in Oslo?", **asked)
    assert called.status == "completed"
    (call,) = [item for item in called.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    assert json.loads(call.arguments)["unit"] in ("C", "F")
    events = list(client.responses.create(input="What is the weather in Oslo?", stream=True,
                                          **asked))  # fmt: skip
    kinds = [event.type for event in events]
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == call.arguments
    assert kinds[-1] == "response.completed"
    assert events[-1].response.output[-1].type == "function_call"
    answered = client.responses.create(
        model=tool_serving.model_id, tools=[flat], temperature=0, max_output_tokens=8,
        input=[
            {"role": "user", "content": "What is the weather in Oslo?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name,
             "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id,
             "output": '{"temperature": 3}'},
        ],
    )  # fmt: skip
    assert answered.usage is not None and called.usage is not None
    # the template rendered the call and its result into the second prompt
    assert answered.usage.input_tokens > called.usage.input_tokens + 20


def test_tools_for_a_template_that_cannot_render_them_are_refused(
    default_model_file: Path,
) -> None:
    plain = start_serving(str(default_model_file), n_slots=1, n_ctx_per_slot=512)
    try:
        with pytest.raises(openai.BadRequestError, match="does not render tools"):
            plain.client().chat.completions.create(
                model=plain.model_id, messages=ASK, tools=[WEATHER]
            )
    finally:
        plain.close()


def _data_url(colour: str) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), colour).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_an_image_request_to_the_vision_pair(tmp_path_factory: pytest.TempPathFactory) -> None:
    model, mmproj = write_synthetic_vlm(tmp_path_factory.mktemp("vlm"))
    vision = start_serving(str(model), str(mmproj), n_slots=2, n_ctx_per_slot=1024)
    try:
        client = vision.client()
        content = [
            {"type": "image_url", "image_url": {"url": _data_url("red")}},
            {"type": "text", "text": "What colour is this?"},
        ]
        messages = [{"role": "user", "content": content}]
        first = client.chat.completions.create(
            model=vision.model_id, messages=messages, temperature=0, max_tokens=6
        )
        text_only = client.chat.completions.create(
            model=vision.model_id, messages=[{"role": "user", "content": "What colour is this?"}],
            temperature=0, max_tokens=6,
        )  # fmt: skip
        again = client.chat.completions.create(
            model=vision.model_id, messages=messages, temperature=0, max_tokens=6
        )
        assert first.choices[0].finish_reason in ("stop", "length")
        assert first.usage is not None and text_only.usage is not None and again.usage
        assert first.usage.prompt_tokens > text_only.usage.prompt_tokens + 8  # the image's
        # asked again, the image's cells are reused rather than evaluated anew
        assert again.usage.prompt_tokens_details.cached_tokens > text_only.usage.prompt_tokens
        assert again.choices[0].message.content == first.choices[0].message.content
    finally:
        vision.close()


THINKING_TEMPLATE = (
    "{%- for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}"
    "<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "<think>\n\n</think>\n\n{%- else %}<think>\n{%- endif %}{%- endif %}"
)


def test_reasoning_goes_to_reasoning_content(make_synthetic) -> None:
    """A template that opens the thinking in its generation prompt (Qwen3's, DeepSeek-R1's):
    the reply starts inside it, so what the model says until </think> is reasoning."""
    model = make_synthetic("llama", "F16", chat_template=THINKING_TEMPLATE)
    thinker = start_serving(str(model), n_slots=1, n_ctx_per_slot=512)
    try:
        client = thinker.client()
        thought = client.chat.completions.create(
            model=thinker.model_id, messages=ASK, temperature=0, max_tokens=12
        )
        message = thought.choices[0].message
        reasoning = (message.model_extra or {}).get("reasoning_content", "")
        assert reasoning.strip() and not message.content  # cut short inside its thinking
        chunks = list(
            client.chat.completions.create(
                model=thinker.model_id, messages=ASK, temperature=0, max_tokens=12, stream=True
            )
        )
        streamed = "".join(
            (c.choices[0].delta.model_extra or {}).get("reasoning_content", "") for c in chunks
        )
        assert streamed == reasoning
        answered = client.chat.completions.create(
            model=thinker.model_id, messages=ASK, temperature=0, max_tokens=12,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )  # fmt: skip
        assert answered.choices[0].message.content  # no thinking: it all is the answer
    finally:
        thinker.close()
