"""The OpenAI-compatible server with the official `openai` client, a real server on a loopback
port and the real default model."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import openai
import pytest
from api_server_fixtures import LogWatch, Serving, start_serving

from app.api.server import ApiServer, ServerStartError
from app.api.server_config import ServerConfig
from app.cli.main import main
from app.stores.model_library import ModelLibrary
from engine.errors import BadInputError

QUESTION = [{"role": "user", "content": "Name three colours of the rainbow."}]


@pytest.fixture(scope="module")
def serving(default_model_file: Path) -> Iterator[Serving]:
    started = start_serving(str(default_model_file), n_slots=8, n_ctx_per_slot=1024)
    yield started
    started.close()


def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        url, body, {"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _with_content(body: dict, content: list) -> bytes:
    return json.dumps({**body, "messages": [{"role": "user", "content": content}]}).encode()


def test_models_are_listed_and_an_unknown_one_is_404(serving: Serving) -> None:
    client = serving.client()
    listed = client.models.list()
    assert [m.id for m in listed.data] == [serving.model_id]
    assert (listed.data[0].model_extra or {})["meta"]["n_ctx_per_slot"] == 1024
    assert client.models.retrieve(serving.model_id).id == serving.model_id
    with pytest.raises(openai.NotFoundError) as refused:
        client.models.retrieve("no-such-model")
    assert f"the loaded model is {serving.model_id!r}" in str(refused.value)
    # one model served: a client's fixed name gets it, named in the reply (as llama-server)
    served = client.chat.completions.create(model="gpt-4o", messages=QUESTION, max_tokens=1)
    assert served.model == serving.model_id


def test_a_stream_assembles_to_the_same_text_as_the_whole_reply(serving: Serving) -> None:
    client = serving.client()
    whole = client.chat.completions.create(
        model=serving.model_id, messages=QUESTION, temperature=0, seed=7, max_tokens=40
    )
    chunks = list(
        client.chat.completions.create(
            model=serving.model_id, messages=QUESTION, temperature=0, seed=7, max_tokens=40,
            stream=True, stream_options={"include_usage": True},
        )
    )  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert whole.choices[0].message.content == text
    assert text.strip()
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason in ("stop", "length")
    assert chunks[-1].choices == [] and chunks[-1].usage is not None  # the usage chunk
    usage, streamed = whole.usage, chunks[-1].usage
    assert usage is not None and usage.prompt_tokens > 10
    assert 0 < usage.completion_tokens <= 40
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert streamed.completion_tokens == usage.completion_tokens
    assert streamed.prompt_tokens == usage.prompt_tokens


def test_completions_and_logprobs(serving: Serving) -> None:
    client = serving.client()
    done = client.completions.create(
        model=serving.model_id, prompt="The capital of France is", temperature=0,
        max_tokens=6, logprobs=3,
    )  # fmt: skip
    choice = done.choices[0]
    assert choice.text and choice.logprobs is not None
    assert "".join(choice.logprobs.tokens or []) == choice.text
    logprobs = choice.logprobs
    for chosen, top in zip(logprobs.token_logprobs or [], logprobs.top_logprobs or [], strict=True):
        assert chosen is not None and chosen <= 0
        assert len(top) == 3 and max(top.values()) == pytest.approx(chosen)  # greedy: the best
    chat = client.chat.completions.create(
        model=serving.model_id, messages=QUESTION, temperature=0, max_tokens=5,
        logprobs=True, top_logprobs=2,
    )  # fmt: skip
    content = chat.choices[0].logprobs.content
    assert content and all(len(t.top_logprobs) == 2 for t in content)
    assert "".join(t.token for t in content) == chat.choices[0].message.content


def test_json_schema_output_parses_and_validates(serving: Serving) -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 30},
            "population": {"type": "integer"},
            "coastal": {"type": "boolean"},
        },
        "required": ["city", "population", "coastal"],
        "additionalProperties": False,
    }
    reply = serving.client().chat.completions.create(
        model=serving.model_id,
        messages=[{"role": "user", "content": "Describe Paris as JSON."}],
        response_format={
            "type": "json_schema", "json_schema": {"name": "city", "schema": schema}
        },
        temperature=0, max_tokens=120,
    )  # fmt: skip
    data = json.loads(reply.choices[0].message.content or "")
    jsonschema.validate(data, schema)


def test_a_schema_the_grammar_cannot_express_is_refused(serving: Serving) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        serving.client().chat.completions.create(
            model=serving.model_id, messages=QUESTION,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"not": {"type": "string"}}},
            },
        )  # fmt: skip
    assert caught.value.code == "unsupported_schema"


def test_a_stop_string_ends_the_reply_before_it(serving: Serving) -> None:
    client = serving.client()
    free = client.chat.completions.create(
        model=serving.model_id, messages=QUESTION, temperature=0, max_tokens=40
    )
    text = free.choices[0].message.content or ""
    words = text.split()
    assert len(words) > 4, text
    stop = words[3]
    stopped = client.chat.completions.create(
        model=serving.model_id, messages=QUESTION, temperature=0, max_tokens=40, stop=[stop]
    )
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].message.content == text[: text.index(stop)]


def test_bad_requests_get_openai_errors(serving: Serving) -> None:
    url = f"{serving.base_url}/chat/completions"
    status, body = _post(url, b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    ok = {"model": serving.model_id, "messages": QUESTION}
    status, body = _post(url, json.dumps({**ok, "n": 9}).encode())  # more than the 8 slots
    assert status == 400 and body["error"]["param"] == "n"
    remote = [{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]
    status, body = _post(
        url, json.dumps({**ok, "messages": [{"role": "user", "content": remote}]}).encode()
    )
    assert status == 400 and body["error"]["code"] == "unsupported_image_url"
    png = "data:image/png;base64,iVBORw0KGgo="
    image = [{"type": "image_url", "image_url": {"url": png}}, {"type": "text", "text": "hi"}]
    status, body = _post(
        url, json.dumps({**ok, "messages": [{"role": "user", "content": image}]}).encode()
    )
    assert status == 400 and body["error"]["code"] == "model_not_multimodal"
    status, body = _post(url, json.dumps({**ok, "temperature": "hot"}).encode())
    assert status == 400 and body["error"]["param"] == "temperature"


def test_an_oversized_body_is_413(serving: Serving) -> None:
    padding = "x" * (33 * 2**20)
    body = json.dumps({"model": serving.model_id, "messages": QUESTION, "pad": padding})
    status, answer = _post(f"{serving.base_url}/chat/completions", body.encode())
    assert status == 413 and "32 MB" in answer["error"]["message"]


def test_a_context_overflow_is_400_with_its_code(serving: Serving) -> None:
    long_text = "word " * 3000
    with pytest.raises(openai.BadRequestError) as caught:
        serving.client().chat.completions.create(
            model=serving.model_id, messages=[{"role": "user", "content": long_text}]
        )
    assert caught.value.code == "context_length_exceeded"
    assert "1024" in str(caught.value)


def test_eight_clients_at_once_each_get_a_whole_answer(serving: Serving) -> None:
    questions = [f"Write one sentence about the number {n}." for n in range(8)]

    async def ask(client: openai.AsyncOpenAI, question: str) -> tuple[str, str | None]:
        stream = await client.chat.completions.create(
            model=serving.model_id, messages=[{"role": "user", "content": question}],
            temperature=0, max_tokens=24, stream=True,
        )  # fmt: skip
        text, finish = [], None
        async for chunk in stream:
            text.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        return "".join(text), finish

    async def everyone() -> list[tuple[str, str | None]]:
        client = serving.async_client()
        try:
            return await asyncio.gather(*(ask(client, q) for q in questions))
        finally:
            await client.close()

    with LogWatch("8 sequences") as watch:
        answers = asyncio.run(everyone())
    assert all(text.strip() and finish in ("stop", "length") for text, finish in answers)
    assert watch.seen.is_set(), "the eight streams never shared a decode step"


def test_a_second_turn_reuses_the_first_turns_cache(serving: Serving) -> None:
    client = serving.client()
    first_turn = [
        {"role": "system", "content": "You are a terse assistant. " * 8},
        {"role": "user", "content": "What is a prime number?"},
    ]
    first = client.chat.completions.create(
        model=serving.model_id, messages=first_turn, temperature=0, max_tokens=30
    )
    second_turn = [
        *first_turn,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Give an example."},
    ]
    second = client.chat.completions.create(
        model=serving.model_id, messages=second_turn, temperature=0, max_tokens=10
    )
    assert first.usage is not None and second.usage is not None
    cached = second.usage.prompt_tokens_details.cached_tokens
    evaluated = second.usage.prompt_tokens - cached
    print(f"second turn: {second.usage.prompt_tokens} prompt tokens, {evaluated} evaluated")
    assert cached >= first.usage.prompt_tokens
    assert evaluated < 30


def test_a_client_that_disconnects_cancels_its_sequence(serving: Serving) -> None:
    host, port = serving.server.address.removeprefix("http://").split(":")
    body = json.dumps({
        "model": serving.model_id, "messages": QUESTION, "max_tokens": 500,
        "temperature": 1.0, "stream": True,
    }).encode()  # fmt: skip
    with LogWatch("cancelled, its cells freed") as watch:
        with socket.create_connection((host, int(port)), timeout=30) as conn:
            conn.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                b"application/json\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
            received = b""
            while b"content" not in received:  # the stream has started
                received += conn.recv(4096)
        assert watch.seen.wait(10), "the engine never cancelled the abandoned stream"
    with LogWatch("llama_decode") as steps:
        served = serving.client().chat.completions.create(
            model=serving.model_id, messages=QUESTION, temperature=0, max_tokens=12
        )
    assert served.choices[0].finish_reason in ("stop", "length")
    decode_steps = [m for m in steps.messages if m.startswith("llama_decode") and "0 prompt" in m]
    assert decode_steps and all("1 sequences" in m for m in decode_steps), decode_steps[:3]


def test_a_full_queue_answers_429(default_model_file: Path) -> None:
    narrow = start_serving(str(default_model_file), n_slots=1, max_queue=0, n_ctx_per_slot=512)
    try:
        client = narrow.client()
        stream = client.chat.completions.create(
            model=narrow.model_id, messages=QUESTION, max_tokens=300, stream=True,
            temperature=1.0,
        )  # fmt: skip
        next(iter(stream))  # the one slot is taken
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model=narrow.model_id, messages=QUESTION)
        stream.close()
    finally:
        narrow.close()


def test_a_wrong_api_key_is_401(default_model_file: Path) -> None:
    guarded = start_serving(str(default_model_file), api_key="s3cret", n_slots=1)
    try:
        with pytest.raises(openai.AuthenticationError):
            guarded.client(api_key="wrong").models.list()
        assert guarded.client(api_key="s3cret").models.list().data
    finally:
        guarded.close()


def test_a_taken_port_is_one_line(serving: Serving) -> None:
    port = int(serving.server.address.rpartition(":")[2])
    second = ApiServer(serving.worker, ServerConfig(port=port))
    with pytest.raises(ServerStartError, match=f"port {port} is already in use"):
        second.start()
    # the worker hands events only to the server that listens (Outbox.together)
    assert len(serving.worker.api.deliveries) == 1


def test_serve_refuses_bad_input_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    assert "--api-key" in capsys.readouterr().err
    with pytest.raises(BadInputError):
        ServerConfig(host="192.168.1.5")


def test_the_request_log_has_tokens_and_seconds_but_no_prompt(serving: Serving) -> None:
    with LogWatch("POST /v1/chat/completions 200") as watch:
        reply = serving.client().chat.completions.create(
            model=serving.model_id, messages=QUESTION, temperature=0, max_tokens=4
        )
        assert watch.seen.wait(5)
    line = next(m for m in watch.messages if "POST /v1/chat/completions 200" in m)
    assert reply.usage is not None
    assert re.search(
        rf"prompt {reply.usage.prompt_tokens} \(\d+ cached\) completion "
        rf"{reply.usage.completion_tokens} tokens, \d+\.\d\d s$",
        line,
    ), line
    assert "Name three colours" not in " ".join(watch.messages)  # no prompt text in the log


def test_with_switching_allowed_a_request_loads_the_model_it_names(
    default_model_file: Path, make_synthetic
) -> None:
    other = make_synthetic("llama", "F16")
    with ModelLibrary() as library:
        added = library.add(other)
    switching = start_serving(str(default_model_file), n_slots=2, allow_model_switch=True)
    try:
        client = switching.client()
        other_id = added.name
        listed = [m.id for m in client.models.list().data]
        assert listed[0] == switching.model_id and other_id in listed
        reply = client.chat.completions.create(
            model=other_id, messages=QUESTION, temperature=0, max_tokens=4
        )
        assert reply.model == other_id and reply.choices[0].finish_reason in ("stop", "length")
        assert switching.worker.api.model is not None
        assert switching.worker.api.model.id == other_id
        back = client.chat.completions.create(
            model=switching.model_id, messages=QUESTION, temperature=0, max_tokens=4
        )
        assert back.model == switching.model_id
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="not-in-the-library", messages=QUESTION)
    finally:
        switching.close()


def test_serve_on_a_taken_port_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    request_log = logging.getLogger("shardchat.api")
    handlers = list(request_log.handlers)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port), "--threads", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"shardchat: error: port {port} is already in use on 127.0.0.1; choose "
                   "another (--port)"]  # fmt: skip
    # its request log's handler went with it: later servers here log to no closed stderr
    assert request_log.handlers == handlers
