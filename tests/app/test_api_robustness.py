"""One bad request fails alone: a corpus of bad bodies, headers and routes against one real
server on loopback with the real default model.

Every case must end in its 4xx with an OpenAI-shaped error body naming the field, never a
500 or a hang (each request has a client timeout), and streams running while the corpus is
sent must finish with the same tokens as without it (greedy sampling, so they compare).
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import logging
import queue
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
import pytest
from api_server_fixtures import Serving, start_serving
from PIL import Image

from app.api.engine_calls import ApiEvent, ApiFailed, ApiFinished, ApiJob
from app.api.openai_request import parse_chat
from engine.generation.prompt_pieces import TextRun
from tests.synthetic_vision import write_synthetic_vlm

API_KEY = "sk-robustness"
TIMEOUT = 30  # seconds: a request that hangs fails its test instead of stalling the suite
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
HELLO = [{"role": "user", "content": "Hi"}]
OK = {"model": "any", "messages": HELLO, "max_tokens": 1}
OK_COMPLETION = {"model": "any", "prompt": "Hello", "max_tokens": 1}
HUGE = "9" * 5000  # digits: past what Python reads as an integer
NAN, INFINITY = float("nan"), float("inf")  # json.dumps writes NaN and Infinity
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@dataclass(frozen=True)
class Case:
    name: str
    body: bytes
    param: str | None  # the field the error must name (None: the body as a whole)
    path: str = CHAT
    status: int = 400


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _with(base: dict[str, Any], **changes: Any) -> bytes:
    return _json({**base, **changes})


def _raw_with(base: dict[str, Any], field: str, raw: str) -> bytes:
    """The body with a field whose JSON text is written as is (numbers json.dumps cannot)."""
    marker = "__raw__"
    return _with(base, **{field: marker}).replace(f'"{marker}"'.encode(), raw.encode())


def _nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = {"a": leaf}
    return leaf


def _generated_cases() -> list[Case]:
    """Each field with values of the wrong type or out of range."""
    wrong = {
        "string": "x", "int": 7, "float": 1.5, "true": True, "list": [1], "object": {"a": 1},
        "negative": -3, "nan": NAN, "infinity": INFINITY,
    }  # fmt: skip
    numbers = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "min_p")
    invalid = {
        **{field: ["string", "true", "list", "object", "negative", "nan", "infinity"]
           for field in (*numbers, "repeat_penalty")},
        "max_tokens": ["string", "float", "true", "list", "object", "negative", "infinity"],
        "top_k": ["string", "float", "true", "list", "object", "negative"],
        "seed": ["string", "float", "true", "list", "object", "infinity"],
        "n": ["string", "int", "float", "true", "list", "object", "negative"],
        "stream": ["string", "int", "float", "list", "object", "negative"],
        "logprobs": ["string", "int", "float", "list", "object", "negative"],
        "model": ["int", "float", "true", "list", "object", "negative"],
        "messages": ["string", "int", "true", "object", "negative"],
        "stop": ["int", "true", "list", "object"],
        "stream_options": ["string", "int", "list", "true"],
        "response_format": ["string", "int", "list", "true", "object"],
        "tools": ["string", "int", "true", "object", "list"],
        "tool_choice": ["string", "int", "list", "true", "object"],
    }  # fmt: skip
    cases = [
        Case(f"{field}={kind}", _with(OK, **{field: wrong[kind]}), field)
        for field, kinds in invalid.items()
        for kind in kinds
    ]
    cases += [
        Case(f"{field}={HUGE[:3]}...(5000 digits)", _raw_with(OK, field, HUGE), field)
        for field in ("max_tokens", "seed", "temperature", "top_k", "n")
    ]
    cases += [
        Case(f"{field}=5000-digit float", _raw_with(OK, field, HUGE + ".5"), field)
        for field in ("temperature", "top_p")
    ]
    cases += [
        Case(f"completion {field}={kind}", _with(OK_COMPLETION, **{field: wrong[kind]}),
             field, COMPLETIONS)
        for field, kinds in {
            "prompt": ["int", "true", "object", "list"],
            "logprobs": ["string", "negative", "float"],
            "max_tokens": ["string", "negative"],
        }.items()
        for kind in kinds
    ]  # fmt: skip
    return cases


def _message_cases() -> list[Case]:
    def message(**fields: Any) -> bytes:
        return _with(OK, messages=[{"role": "user", "content": "Hi", **fields}])

    def content(parts: Any) -> bytes:
        return message(content=parts)

    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    return [
        Case("empty messages", _with(OK, messages=[]), "messages"),
        Case("a message that is a number", _with(OK, messages=[7]), "messages[0]"),
        Case("a message that is a list", _with(OK, messages=[[]]), "messages[0]"),
        Case("role given as a list", message(role=["user"]), "messages[0].role"),
        Case("role given as an object", message(role={"user": 1}), "messages[0].role"),
        Case("role given as a number", message(role=7), "messages[0].role"),
        Case("an unknown role", message(role="wizard"), "messages[0].role"),
        Case("no role", _with(OK, messages=[{"content": "Hi"}]), "messages[0].role"),
        Case("content a number", content(7), "messages[0]"),
        Case("content an object", content({"text": "Hi"}), "messages[0]"),
        Case("a content part that is a number", content([7]), "messages[0].content[0]"),
        Case("a text part without text", content([{"type": "text"}]), "messages[0].content[0]"),
        Case(
            "a text part with a number",
            content([{"type": "text", "text": 7}]),
            "messages[0].content[0]",
        ),  # fmt: skip
        Case("an unknown part type", content([{"type": "audio"}]), "messages[0].content[0]"),
        Case(
            "an image in an assistant message",
            _with(OK, messages=[{"role": "assistant", "content": [image]}]),
            "messages[0].content[0]",
        ),  # fmt: skip
        Case(
            "an image url that is a number",
            content([{"type": "image_url", "image_url": {"url": 7}}]),
            "messages[0].content[0]",
        ),  # fmt: skip
        Case(
            "an image from the network",
            content([{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]),
            "messages[0].content[0]",
        ),  # fmt: skip
        Case(
            "a data URL without base64",
            content([{"type": "image_url", "image_url": {"url": "data:image/png,AAAA"}}]),
            "messages[0].content[0]",
        ),  # fmt: skip
        Case(
            "a data URL with bad base64",
            content([{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}]),
            "messages[0].content[0]",
        ),  # fmt: skip
        Case(
            "tool_calls a string",
            _with(OK, messages=[{"role": "assistant", "content": "", "tool_calls": "x"}]),
            "messages[0].tool_calls",
        ),  # fmt: skip
        Case(
            "a tool call without a function",
            _with(OK, messages=[{"role": "assistant", "content": "", "tool_calls": [7]}]),
            "messages[0]",
        ),  # fmt: skip
    ]


def _tool_cases() -> list[Case]:
    def tools(*listed: Any, **more: Any) -> bytes:
        return _with(OK, tools=list(listed), **more)

    def with_parameters(parameters: Any) -> bytes:
        return tools({"type": "function", "function": {"name": "f", "parameters": parameters}})

    cases = [
        Case("a tools item that is a number", tools(7), "tools[0]"),
        Case("a tools item that is a string", tools("weather"), "tools[0]"),
        Case("a tools item that is a list", tools([]), "tools[0]"),
        Case("a tool without a type", tools({"function": {"name": "f"}}), "tools[0]"),
        Case("a tool without a function", tools({"type": "function"}), "tools[0]"),
        Case(
            "a tool named by a number",
            tools({"type": "function", "function": {"name": 7}}),
            "tools[0]",
        ),  # fmt: skip
        Case(
            "a tool_choice naming no tool",
            tools(WEATHER, tool_choice={"type": "function", "function": {"name": "nope"}}),
            "tool_choice",
        ),  # fmt: skip
        Case(
            "tool_choice required without tools", _with(OK, tool_choice="required"), "tool_choice"
        ),  # fmt: skip
    ]
    cases += [
        Case(f"tool parameters that are {kind}", with_parameters(value),
             "tools[0].function.parameters")
        for kind, value in {"a number": 5, "a string": "x", "a list": [], "true": True}.items()
    ]  # fmt: skip
    return cases


BAD_SCHEMAS: dict[str, Any] = {
    "an unknown type": {"type": "nonsense"},
    "a dangling $ref": {"$ref": "#/nowhere"},
    "a remote $ref": {"$ref": "http://example.com/schema"},
    "properties a number": {"type": "object", "properties": 5},
    "items a number": {"type": "array", "items": 5},
    "anyOf a number": {"anyOf": 5},
    "enum a number": {"enum": 5},
    "required a number": {"type": "object", "required": 5, "properties": {"a": {}}},
    "minLength a string": {"type": "string", "minLength": "x"},
    "allOf of a number": {"allOf": [5]},
    "format a number": {"type": "string", "format": 5},
    "a pattern without anchors": {"type": "string", "pattern": "("},
    "a $ref that is a number": {"properties": {"a": {"$ref": 5}}},
    "minItems a huge float": {"type": "array", "items": {"type": "string"}, "minItems": 1e300},
    "nested 200 deep": _nested(200, {"type": "string"}),
}


def _schema_cases() -> list[Case]:
    def schema(value: Any) -> bytes:
        return _with(OK, response_format={"type": "json_schema", "json_schema": {"schema": value}})

    return [
        Case("response_format json_schema without a schema",
             _with(OK, response_format={"type": "json_schema"}), "response_format"),
        Case("response_format type xml", _with(OK, response_format={"type": "xml"}),
             "response_format"),
        Case("a schema that is a number", schema(5), "response_format"),
        *[Case(f"json_schema with {name}", schema(value), "response_format")
          for name, value in BAD_SCHEMAS.items()],
        # converted, but to a grammar llama.cpp cannot parse: refused when the reply starts
        Case("json_schema with an empty enum", schema({"enum": []}), None),
        Case("json_schema with an empty anyOf", schema({"anyOf": []}), None),
    ]  # fmt: skip


LONE_SURROGATES = {
    "in a message": ("messages[0].content", _with(OK, messages=[{"role": "user",
                                                                  "content": "a\ud800b"}])),
    "in a text part": ("messages[0].content[0].text", _with(OK, messages=[{"role": "user",
                       "content": [{"type": "text", "text": "\udfff"}]}])),
    "in a system message": ("messages[0].content", _with(OK, messages=[{"role": "system",
                            "content": "\udbff"}, *HELLO])),
    "in the model name": ("model", _with(OK, model="\ud800")),
    "in a stop string": ("stop", _with(OK, stop="\ud800")),
    "in a tool's name": ("tools[0].function.name", _with(OK, tools=[{"type": "function",
                         "function": {"name": "\ud800"}}])),
    "in a key": ("a key in messages[0]", _with(OK, messages=[{"role": "user",
                 "content": "Hi", "\ud800": 1}])),
}  # fmt: skip


def _text_cases() -> list[Case]:
    cases = [Case(f"a lone surrogate {where}", body, param)
             for where, (param, body) in LONE_SURROGATES.items()]  # fmt: skip
    cases.append(
        Case("a lone surrogate in a completion prompt",
             _with(OK_COMPLETION, prompt="\ud800"), "prompt", COMPLETIONS)
    )  # fmt: skip
    deep_list = "[" * 5000 + "]" * 5000
    cases += [
        Case("an empty completion prompt", _with(OK_COMPLETION, prompt=""), "prompt", COMPLETIONS),
        Case("an empty body", b"", None),
        Case("a cut body", b'{"model": "any", "messages": [', None),
        Case("a list body", b"[]", None),
        Case("a null body", b"null", None),
        Case("a string body", b'"hi"', None),
        Case("bytes that are not UTF-8", b'{"model": "\xff\xfe"}', None),
        Case("a body nested 5000 deep", deep_list.encode(), None),
        Case("a message nested 5000 deep", _raw_with(OK, "messages", deep_list), None),
        Case("an extra field nested 100 deep", _with(OK, extra=_nested(100, 1)), "extra"),
        Case("tool parameters nested 100 deep",
             _with(OK, tools=[{"type": "function", "function": {
                 "name": "f", "parameters": _nested(100, {"type": "object"})}}]), "tools"),
    ]  # fmt: skip
    return cases


def _llama_server_cases() -> list[Case]:
    """llama.cpp's own server tests (tools/server/tests/unit) that apply here: its invalid
    chat requests (test_invalid_chat_completion_req) and response formats
    (test_completion_with_response_format). Left out: its json_object `schema`, `grammar`
    and `json_schema` extensions, which this server does not take."""
    invalid_messages = {
        "null": None, "a string": "string", "[123]": [123], "[{}]": [{}],
        "a role 123": [{"role": 123}], "content 123": [{"role": "system", "content": 123}],
        "a message {}": [{"role": "system", "content": "test"}, {}],
    }  # fmt: skip
    return [
        *[Case(f"llama-server: messages {name}", _with(OK, messages=value), "messages")
          for name, value in invalid_messages.items()],
        Case("llama-server: response_format sound", _with(OK, response_format={"type": "sound"}),
             "response_format"),
        Case("llama-server: json_schema type 123",
             _with(OK, response_format={"type": "json_schema", "json_schema": {
                 "schema": {"type": 123}}}), "response_format"),
    ]  # fmt: skip


CORPUS = [
    *_generated_cases(), *_message_cases(), *_tool_cases(), *_schema_cases(), *_text_cases(),
    *_llama_server_cases(),
]  # fmt: skip


@pytest.fixture(scope="module")
def serving(default_model_file: Path) -> Iterator[Serving]:
    started = start_serving(str(default_model_file), n_slots=4, n_ctx_per_slot=512, api_key=API_KEY)
    yield started
    started.close()


def _send(
    serving: Serving,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str | bytes] | None = None,
) -> tuple[int, Any]:
    """(status, parsed body) of one request on a connection of its own."""
    address = urlsplit(serving.base_url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=TIMEOUT)
    try:
        sent: dict[str, str | bytes] = {
            "Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json",
            **(headers or {}),
        }  # fmt: skip
        connection.request(method, path, body, sent)  # type: ignore[arg-type]
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def _assert_refused(answer: tuple[int, Any], status: int, param: str | None) -> None:
    code, body = answer
    assert code == status, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, body
    assert isinstance(error["message"], str) and error["message"], body
    assert "Traceback" not in error["message"]
    if param is not None:  # the field, or a part of it
        named = error["param"] or ""
        assert named == param or named.startswith((f"{param}.", f"{param}[")), body


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_a_bad_body_is_refused_by_name(serving: Serving, case: Case) -> None:
    _assert_refused(_send(serving, "POST", case.path, case.body), case.status, case.param)


ROUTES = [
    ("GET", CHAT, 405), ("PUT", "/v1/models", 405), ("DELETE", "/health", 405),
    ("POST", "/v1/nothing", 404), ("GET", "/", 404), ("GET", "/v1/embeddings", 404),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "status"), ROUTES)
def test_unknown_routes_and_wrong_methods(
    serving: Serving, method: str, path: str, status: int
) -> None:
    _assert_refused(_send(serving, method, path, b"{}" if method != "GET" else None), status, None)


AUTHORIZATION = [
    (b"Bearer \xff\xfe\xfd", 401, None),  # not UTF-8: a wrong key like any other
    ("Basic c2stcm9idXN0bmVzcw==", 401, None),
    ("Bearer wrong", 401, None),
    ("", 401, None),
]


@pytest.mark.parametrize(("header", "status", "param"), AUTHORIZATION)
def test_bad_authorization_headers(
    serving: Serving, header: str | bytes, status: int, param: str | None
) -> None:
    answer = _send(serving, "POST", CHAT, _json(OK), {"Authorization": header})
    _assert_refused(answer, status, param)


ACCEPTED = {
    "n null": _with(OK, n=None),
    "tool_choice null": _with(OK, tool_choice=None),
    "stream null": _with(OK, stream=None),
    "a model name the server does not know": _with(OK, model="gpt-4o"),
    "a lower-case bearer scheme": _json(OK),
}


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_what_clients_commonly_send_is_served(serving: Serving, name: str) -> None:
    headers = {"Authorization": f"bearer {API_KEY}"} if "bearer" in name else {}
    status, body = _send(serving, "POST", CHAT, ACCEPTED[name], headers)
    assert status == 200, body
    assert body["model"] == serving.model_id  # the loaded model is named, whatever was asked
    assert body["choices"][0]["finish_reason"] in ("stop", "length")


def test_a_prompt_far_too_long_is_refused_before_it_is_tokenised(serving: Serving) -> None:
    """24 MB would take seconds to tokenise on the engine's thread, stalling every stream; its
    length alone says it cannot fit 512 tokens, so it is refused from that ("at least")."""
    huge = "word " * (24 * 2**20 // 5)
    body = _with(OK, messages=[{"role": "user", "content": huge}])
    answer = _send(serving, "POST", CHAT, body)
    _assert_refused(answer, 400, "messages")
    assert answer[1]["error"]["code"] == "context_length_exceeded"
    assert "takes at least" in answer[1]["error"]["message"]


def test_malformed_http_is_one_warning_line(serving: Serving) -> None:
    address = urlsplit(serving.base_url)
    requests = [
        b"GARBAGE\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Flood: y\r\n" * 200 + b"\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-Long: " + b"y" * 20000 + b"\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: nope\r\n\r\n",
    ]
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    server_log = logging.getLogger("aiohttp.server")
    server_log.addHandler(handler)
    try:
        for raw in requests:
            with socket.create_connection((address.hostname, address.port), TIMEOUT) as sock:
                sock.sendall(raw)
                answer = sock.recv(4096)
            assert re.match(rb"HTTP/1\.[01] 4\d\d ", answer), answer[:80]
    finally:
        server_log.removeHandler(handler)
    for record in records:
        assert record.levelno <= logging.WARNING and record.exc_info is None
        assert "\n" not in record.getMessage()
    assert sum(r.levelno == logging.WARNING for r in records) >= 3


COUNTING = [{"role": "user", "content": "Count from 1 to 40, separated by commas."}]


def _stream_texts(serving: Serving, while_running: Any = None) -> list[str]:
    """Two greedy streams at once; `while_running` runs once both have begun."""
    begun = [threading.Event(), threading.Event()]
    texts: list[str] = ["", ""]
    client = serving.client(api_key=API_KEY, timeout=TIMEOUT)

    def read(index: int) -> None:
        chunks = client.chat.completions.create(
            model=serving.model_id, messages=COUNTING, temperature=0, seed=index,
            max_tokens=16, stream=True,
        )  # fmt: skip
        for chunk in chunks:
            texts[index] += chunk.choices[0].delta.content or "" if chunk.choices else ""
            begun[index].set()

    readers = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for reader in readers:
        reader.start()
    assert all(event.wait(TIMEOUT) for event in begun)
    if while_running is not None:
        while_running()
    for reader in readers:
        reader.join(4 * TIMEOUT)
        assert not reader.is_alive()
    return texts


def _job_that_fails_in_the_engine(serving: Serving) -> queue.Queue[tuple[ApiEvent, int]]:
    """A request with a lone surrogate handed to the engine as if parsing had let it through:
    the engine must fail it alone (before, its encode error closed every stream). Its events
    come with the number of streams running when each was sent (on the engine's thread)."""
    call = parse_chat({"model": serving.model_id, "messages": HELLO})
    prompt = replace(call.prompt, messages=({"role": "user", "content": "\ud800"},))
    events: queue.Queue[tuple[ApiEvent, int]] = queue.Queue()

    def sink(event: ApiEvent) -> None:
        events.put((event, serving.worker.api.counts[0]))

    serving.worker.serve_api(ApiJob(replace(call, prompt=prompt), sink))
    return events


def test_streams_finish_unchanged_while_bad_requests_arrive(serving: Serving) -> None:
    alone = _stream_texts(serving)
    failed: list[tuple[ApiEvent, int]] = []

    def send_the_corpus() -> None:
        events = _job_that_fails_in_the_engine(serving)
        failed.append(events.get(timeout=TIMEOUT))
        for case in CORPUS[::6]:
            _assert_refused(_send(serving, "POST", case.path, case.body), 400, case.param)

    together = _stream_texts(serving, send_the_corpus)
    assert together == alone
    assert alone[0].strip() and alone[1].strip()
    ((event, running),) = failed
    assert isinstance(event, ApiFailed) and event.error.status == 500
    assert "UnicodeEncodeError" in event.error.message
    assert running == 2  # it failed while both streams ran, and they ran on


def test_max_tokens_inside_a_character_leaves_no_replacement_character(
    serving: Serving,
) -> None:
    """An emoji is several tokens here: a reply cut after the first must not end in U+FFFD."""
    client = serving.client(api_key=API_KEY, timeout=TIMEOUT)
    asked = {
        "model": serving.model_id,
        "prompt": "🎉🎉🎉🎉🎉🎉🎉🎉",
        "temperature": 0,
        "max_tokens": 1,
    }
    whole = client.completions.create(**asked)
    assert whole.choices[0].finish_reason == "length"
    assert "\ufffd" not in whole.choices[0].text
    streamed = client.completions.create(**asked, stream=True)
    assert "\ufffd" not in "".join(c.choices[0].text for c in streamed if c.choices)


def test_tools_for_a_template_without_them_name_the_way_out(serving: Serving) -> None:
    client = serving.client(api_key=API_KEY, timeout=TIMEOUT)
    with pytest.raises(openai.BadRequestError, match="--prompt-format") as caught:
        client.chat.completions.create(model=serving.model_id, messages=HELLO, tools=[WEATHER])
    assert caught.value.status_code == 400


def _damaged_image_urls() -> dict[str, str]:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), "red").save(buffer, "PNG")
    png = buffer.getvalue()
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), "blue").save(buffer, "WEBP")
    webp = buffer.getvalue()
    damaged = {
        "a PNG cut in half": png[: len(png) // 2],
        "a PNG with flipped header bits": bytes(b ^ 0x10 for b in png[:8]) + png[8:],
        "a WebP cut in half": webp[: len(webp) // 2],
    }
    return {
        name: "data:image/png;base64," + base64.b64encode(data).decode()
        for name, data in damaged.items()
    }


def test_a_damaged_image_is_a_400_naming_why(tmp_path_factory: pytest.TempPathFactory) -> None:
    model, mmproj = write_synthetic_vlm(tmp_path_factory.mktemp("vlm"))
    vision = start_serving(str(model), str(mmproj), n_slots=2, n_ctx_per_slot=512)
    try:
        for name, url in _damaged_image_urls().items():
            content = [{"type": "image_url", "image_url": {"url": url}},
                       {"type": "text", "text": "What is this?"}]  # fmt: skip
            body = _with(OK, messages=[{"role": "user", "content": content}])
            answer = _send(vision, "POST", CHAT, body)
            _assert_refused(answer, 400, "messages")
            assert answer[1]["error"]["code"] == "invalid_image", name
        finished = vision.client().chat.completions.create(
            model=vision.model_id, messages=HELLO, max_tokens=1
        )
        assert finished.choices[0].finish_reason in ("stop", "length")  # it still serves
    finally:
        vision.close()


def test_prompts_are_tokenised_off_the_engines_thread(serving: Serving) -> None:
    """The server's thread renders and tokenises a text prompt (ApiStreams.prepare) and the
    engine takes those tokens as they are: here cut to their first ten, which the usage
    shows. A prompt prepared for a model no longer loaded would be tokenised again."""
    call = parse_chat({"model": serving.model_id, "messages": HELLO, "max_tokens": 1})
    events: queue.Queue[ApiEvent] = queue.Queue()
    job = ApiJob(call, events.put)
    serving.worker.api.prepare(job)
    assert job.prepared is not None
    (run,) = job.prepared.pieces
    assert isinstance(run, TextRun) and len(run.tokens) > 20
    job.prepared = replace(job.prepared, pieces=(TextRun(run.tokens[:10]),))
    serving.worker.serve_api(job)
    while not isinstance(event := events.get(timeout=TIMEOUT), ApiFinished | ApiFailed):
        pass
    assert isinstance(event, ApiFinished) and event.usage.prompt_tokens == 10
