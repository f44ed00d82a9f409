"""The Responses API (/v1/responses) with the official `openai` client, a real server on a
loopback port and the real default model.

The first three tests are llama.cpp's tools/server/tests/unit/test_compat_oai_responses.py
(as vendored with llama-cpp-python 0.3.36), ported: its `(Suddenly)+` was what llama-server's
tinyllama preset says, so here each checks what is true of any model instead, and more
strongly (the text equals a greedy chat completion's, the streamed deltas the completed
text). The newest llama.cpp adds text.format cases, ported after them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_server_fixtures import Serving, start_serving

BOOK = [
    {"role": "system", "content": "Book"},
    {"role": "user", "content": "What is the best book"},
]


@pytest.fixture(scope="module")
def serving(default_model_file: Path) -> Iterator[Serving]:
    started = start_serving(str(default_model_file), n_slots=2, n_ctx_per_slot=1024)
    yield started
    started.close()


def _post(serving: Serving, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{serving.base_url}/responses", json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            raw = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    if body.get("stream"):
        return status, [
            json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")
        ]
    return status, json.loads(raw)


def test_responses_with_openai_library(serving: Serving) -> None:
    client = serving.client()
    res = client.responses.create(
        model="gpt-4.1",
        input=BOOK,
        max_output_tokens=8,
        temperature=0.8,
    )
    assert res.id.startswith("resp_")
    assert res.output[0].id is not None
    assert res.output[0].id.startswith("msg_")
    assert res.output_text
    assert res.model == serving.model_id
    # at temperature 0, the very reply a chat completion of the same messages gives
    greedy = client.responses.create(
        model="gpt-4.1",
        input=BOOK,
        max_output_tokens=8,
        temperature=0,
    )
    chat = client.chat.completions.create(
        model="gpt-4.1",
        messages=BOOK,
        max_tokens=8,
        temperature=0,
    )
    assert greedy.output_text == chat.choices[0].message.content
    assert greedy.usage is not None and chat.usage is not None
    assert greedy.usage.input_tokens == chat.usage.prompt_tokens
    assert greedy.usage.output_tokens == chat.usage.completion_tokens
    assert greedy.usage.total_tokens == greedy.usage.input_tokens + greedy.usage.output_tokens
    cut = chat.choices[0].finish_reason == "length"
    assert greedy.status == ("incomplete" if cut else "completed")
    if cut:
        assert greedy.incomplete_details.reason == "max_output_tokens"


# the reply cut at 8 tokens (response.incomplete), and one a schema's grammar ends
# (response.completed): the default model's answers to BOOK run on past 64 tokens
ENDS = {
    "cut short": {"max_output_tokens": 8},
    "finished": {
        "max_output_tokens": 20,
        "text": {"format": {"type": "json_schema", "name": "t", "schema": {"const": "fooo"}}},
    },
}


@pytest.mark.parametrize("end", list(ENDS))
def test_responses_stream_with_openai_library(serving: Serving, end: str) -> None:
    client = serving.client()
    asked: dict[str, Any] = {
        "model": "gpt-4.1", "input": BOOK, "temperature": 0.8, "extra_body": {"seed": 5},
        **ENDS[end],
    }  # fmt: skip
    stream = client.responses.create(**asked, stream=True)
    gathered_text = ""
    resp_id = ""
    msg_id = ""
    ends = []
    numbers = []
    for r in stream:
        numbers.append(r.sequence_number)
        if r.type == "response.created":
            assert r.response.id.startswith("resp_")
            resp_id = r.response.id
        if r.type == "response.in_progress":
            assert r.response.id == resp_id
        if r.type == "response.output_item.added":
            assert r.item.id is not None
            assert r.item.id.startswith("msg_")
            msg_id = r.item.id
        if r.type in (
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
        ):
            assert r.item_id == msg_id
        if r.type == "response.output_item.done":
            assert r.item.id == msg_id
        if r.type == "response.output_text.delta":
            gathered_text += r.delta
        if r.type in ("response.completed", "response.incomplete"):
            assert r.response.id == resp_id
            assert r.response.output[0].id is not None
            assert r.response.output[0].id.startswith("msg_")
            assert gathered_text == r.response.output_text
            ends.append(r)
    assert numbers == list(range(len(numbers)))
    assert len(ends) == 1 and gathered_text
    # the same seed without streaming: the same text, and the same end
    whole = client.responses.create(**asked)
    assert whole.output_text == gathered_text
    assert ends[0].type == f"response.{whole.status}"
    assert whole.status == ("incomplete" if end == "cut short" else "completed")
    assert ends[0].response.usage.output_tokens == whole.usage.output_tokens


def test_responses_stream_with_llama_telemetry(serving: Serving) -> None:
    status, events = _post(serving, {
        "model": serving.model_id,
        "input": "This is a test" * 10,
        "max_output_tokens": 8,
        "temperature": 0.8,
        "stream": True,
        "timings_per_token": True,
        "return_progress": True,
    })  # fmt: skip
    assert status == 200
    saw_progress = False
    saw_delta_timings = False
    completed = None
    for data in events:
        if "prompt_progress" in data:
            assert data["type"] == "response.in_progress"
            assert data["prompt_progress"]["total"] > 0
            assert data["prompt_progress"]["processed"] >= data["prompt_progress"]["cache"]
            saw_progress = True
        if "timings" in data:
            assert "prompt_per_second" in data["timings"]
            assert "predicted_per_second" in data["timings"]
            if data["type"] == "response.output_text.delta":
                saw_delta_timings = True
        if data["type"] in ("response.completed", "response.incomplete"):
            completed = data
    assert saw_progress
    assert saw_delta_timings
    assert completed is not None
    assert "usage" in completed["response"]
    assert "timings" in completed


@pytest.mark.parametrize(
    ("text_format", "n_predicted", "expected"),
    [
        ({"type": "json_schema", "name": "test", "schema": {"const": "foooooo"}}, 10, '"foooooo"'),
        ({"type": "json_object"}, 10, "{"),
        ({"type": "text"}, 10, None),
        ({"type": "json_schema", "name": "test"}, 0, None),  # no schema: refused
    ],
)
def test_responses_with_text_format(
    serving: Serving, text_format: dict[str, Any], n_predicted: int, expected: str | None
) -> None:
    status, body = _post(serving, {
        "model": serving.model_id, "input": "Write an example",
        "max_output_tokens": n_predicted or 1, "text": {"format": text_format},
    })  # fmt: skip
    if text_format.get("type") == "json_schema" and "schema" not in text_format:
        assert status == 400 and body["error"]["param"] == "text.format"
        return
    assert status == 200, body
    message = next(o for o in body["output"] if o["type"] == "message")
    text = message["content"][0]["text"]
    if expected is not None:
        assert expected in text
    assert body["text"]["format"] == text_format


def test_input_items_become_the_conversation(serving: Serving) -> None:
    """instructions, a developer message, input_text parts and an assistant turn read as
    the chat messages they stand for: the same greedy reply."""
    client = serving.client()
    response = client.responses.create(
        model=serving.model_id, instructions="Answer in one short sentence.",
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Hello."}]},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Hello! How can I help?"}]},
            {"role": "user", "content": "Name a colour."},
        ],
        max_output_tokens=12, temperature=0,
    )  # fmt: skip
    chat = client.chat.completions.create(
        model=serving.model_id, max_tokens=12, temperature=0,
        messages=[
            {"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": "Hello."},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Name a colour."},
        ],
    )  # fmt: skip
    assert response.output_text == chat.choices[0].message.content
    assert response.instructions == "Answer in one short sentence."


REFUSED = {
    "previous_response_id": ({"previous_response_id": "resp_1"}, "previous_response_id"),
    "a hosted tool": ({"tools": [{"type": "web_search"}]}, "tools[0]"),
    "a file": (
        {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
        "input[0].content[0]",
    ),
    "truncation auto": ({"truncation": "auto"}, "truncation"),
    "a stored item": ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
    "no input": ({"input": []}, "input"),
    "max_output_tokens 0": ({"max_output_tokens": 0}, "max_output_tokens"),
    "a bad role": ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role"),
    "a remote image": (
        {
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_image", "image_url": "https://example.com/cat.png"}
                    ],
                }
            ]
        },
        "input[0].content[0]",
    ),  # fmt: skip
    "temperature 3": ({"temperature": 3}, "temperature"),
    "background": ({"background": True}, "background"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_cannot_be_served_is_a_400_naming_the_field(serving: Serving, name: str) -> None:
    changes, param = REFUSED[name]
    body = {"model": serving.model_id, "input": "Hi", "max_output_tokens": 4, **changes}
    status, answer = _post(serving, body)
    assert status == 400, answer
    error = answer["error"]
    assert error["param"] == param, error
    assert error["message"] and "messages" not in error["message"], error
