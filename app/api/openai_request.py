"""An OpenAI request body, checked and turned into what the engine runs.

Everything a client can get wrong is found here, on the server's thread,
before the engine sees the request: each problem is one 400 naming the
parameter, never a silent default. What cannot be known without the model
(does the prompt fit, does the template render tools, can it see images) is
checked when the engine admits the request (app.api.engine_calls).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from app.api.api_errors import ApiError, bad_request
from engine.generation.logprobs import MAX_TOP_LOGPROBS
from engine.generation.sampling import SamplingSettings
from engine.llama.schema_grammar import SchemaNotExpressible, schema_grammar
from engine.model.image_input import ImageFile

MAX_STOP_STRINGS = 4  # OpenAI's limit
_ROLES = {"system", "developer", "user", "assistant", "tool"}
# what an API reply samples with where the request is silent: ShardChat's defaults, without
# the repetition penalty and loop guard the chat window adds (clients set their own penalties)
API_DEFAULTS = SamplingSettings(repeat_penalty=1.0, stop_loops=False)
# deeper than any real request nests; past it, the converter and the template recurse too far
MAX_NESTING = 64


@dataclass(frozen=True)
class ApiPrompt:
    """What the model is asked: chat messages (as the chat template reads them) or text."""

    messages: tuple[dict[str, Any], ...] = ()
    text: str | None = None  # /v1/completions
    images: tuple[ImageFile, ...] = ()
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str | dict[str, Any] = "auto"
    thinking: bool | None = None  # `chat_template_kwargs.enable_thinking`, llama-server's way


@dataclass(frozen=True)
class ApiCall:
    """One request: the prompt, how to sample, how to answer."""

    endpoint: str  # "chat" or "completion"
    model: str
    prompt: ApiPrompt
    settings: SamplingSettings
    stream: bool = False
    include_usage: bool = False
    top_logprobs: int | None = None  # None: no logprobs
    grammar: str | None = None  # from response_format
    n: int = 1  # choices: sequences of the one context, decoded side by side
    timings: bool = False  # llama-server's timings_per_token (the Responses API's events)
    progress: bool = False  # llama-server's return_progress (the Responses API's events)


def parse_chat(body: Any) -> ApiCall:
    """POST /v1/chat/completions."""
    body = request_object(body)
    messages, images = _messages(body.get("messages"))
    tools = _tools(body.get("tools"))
    choice = body.get("tool_choice")
    prompt = ApiPrompt(
        messages=messages,
        images=images,
        tools=tools,
        # null is the default, as OpenAI and llama-server take it
        tool_choice=_tool_choice("auto" if choice is None else choice, tools),
        thinking=_thinking(body),
    )
    top = None
    if _bool(body, "logprobs", False):
        top = _int(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
    elif body.get("top_logprobs") is not None:
        raise bad_request("top_logprobs needs logprobs: true", "top_logprobs")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return _call("chat", body, prompt, top, max_tokens)


def parse_completion(body: Any) -> ApiCall:
    """POST /v1/completions (a prompt string, or a list holding one)."""
    body = request_object(body)
    text = body.get("prompt")
    if isinstance(text, list) and len(text) == 1 and isinstance(text[0], str):
        text = text[0]
    if not isinstance(text, str):
        raise bad_request("prompt must be a string (one prompt per request)", "prompt")
    logprobs = body.get("logprobs")
    top = None if logprobs is None else _int(body, "logprobs", 0, 0, MAX_TOP_LOGPROBS)
    if body.get("echo"):
        raise bad_request("echo is not supported", "echo")
    if body.get("suffix"):
        raise bad_request("suffix (fill-in-the-middle) is not supported", "suffix")
    return _call("completion", body, ApiPrompt(text=text), top, body.get("max_tokens"))


def _call(
    endpoint: str, body: dict[str, Any], prompt: ApiPrompt, top: int | None, max_tokens: Any
) -> ApiCall:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("model is required: the id GET /v1/models lists", "model")
    n = body.get("n")
    if n is None:  # null is the default: one
        n = 1
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise bad_request("n must be a positive integer: how many choices to generate", "n")
    stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("stream_options must be an object", "stream_options")
    include_usage = bool(options and options.get("include_usage"))
    return ApiCall(
        endpoint=endpoint,
        model=model,
        prompt=prompt,
        settings=_settings(body, max_tokens),
        stream=stream,
        include_usage=include_usage,
        top_logprobs=top,
        grammar=_grammar(body.get("response_format")),
        n=n,
    )


def _settings(body: dict[str, Any], max_tokens: Any) -> SamplingSettings:
    changes: dict[str, Any] = {
        "temperature": _number(body, "temperature", API_DEFAULTS.temperature, 0, 2),
        "top_p": _number(body, "top_p", API_DEFAULTS.top_p, 0, 1),
        "presence_penalty": _number(body, "presence_penalty", 0.0, -2, 2),
        "frequency_penalty": _number(body, "frequency_penalty", 0.0, -2, 2),
        "stop": _stop(body.get("stop")),
        # llama-server's extensions, which many clients send
        "top_k": _int(body, "top_k", API_DEFAULTS.top_k, 0, 1 << 20),
        "min_p": _number(body, "min_p", API_DEFAULTS.min_p, 0, 1),
        "repeat_penalty": _number(body, "repeat_penalty", API_DEFAULTS.repeat_penalty, 0.01, 10),
    }
    if changes["top_p"] == 0:
        changes["top_p"] = 1e-6  # OpenAI allows 0: keep only the most likely token
    seed = body.get("seed")
    if seed is not None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise bad_request("seed must be an integer", "seed")
        changes["seed"] = seed % 2**32
    if max_tokens is not None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise bad_request("max_tokens must be a positive integer", "max_tokens")
        changes["max_tokens"] = max_tokens
    else:
        changes["max_tokens"] = 1 << 30  # until the model stops or its context is full
    return API_DEFAULTS.with_changes(**changes)


def _messages(value: Any) -> tuple[tuple[dict[str, Any], ...], tuple[ImageFile, ...]]:
    if not isinstance(value, list) or not value:
        raise bad_request("messages must be a non-empty array", "messages")
    messages: list[dict[str, Any]] = []
    images: list[ImageFile] = []
    for index, message in enumerate(value):
        param = f"messages[{index}]"
        if not isinstance(message, dict):
            raise bad_request(f"{param} must be an object", param)
        role = message.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            raise bad_request(f"{param}.role must be one of {sorted(_ROLES)}", f"{param}.role")
        text, own = _content(message.get("content"), param, role)
        images.extend(own)
        plain: dict[str, Any] = {"role": "system" if role == "developer" else role}
        plain["content"] = "".join("<__media__>\n" for _ in own) + text
        if role == "assistant" and message.get("tool_calls"):
            plain["tool_calls"] = _assistant_tool_calls(message["tool_calls"], param)
        if role == "assistant" and isinstance(message.get("reasoning_content"), str):
            plain["reasoning_content"] = message["reasoning_content"]
        if role == "tool":
            plain["tool_call_id"] = str(message.get("tool_call_id", ""))
            if isinstance(message.get("name"), str):
                plain["name"] = message["name"]
        messages.append(plain)
    return tuple(messages), tuple(images)


def _content(value: Any, param: str, role: str) -> tuple[str, list[ImageFile]]:
    """A message's text and images; content is a string, null (an assistant's tool call) or
    a list of text and image_url parts."""
    if value is None:
        return "", []
    if isinstance(value, str):
        return value, []
    if not isinstance(value, list):
        raise bad_request(f"{param}.content must be a string or an array of parts", param)
    texts: list[str] = []
    images: list[ImageFile] = []
    for index, part in enumerate(value):
        where = f"{param}.content[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "image_url" and role == "user":
            images.append(_image(part.get("image_url"), where, len(images)))
        else:
            raise bad_request(
                f"{where} must be a text part (or, in a user message, an image_url part)", where
            )
    return "\n".join(texts), images


def _image(value: Any, where: str, index: int) -> ImageFile:
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str):
        raise bad_request(f"{where}.image_url.url must be a string", where)
    if not url.startswith("data:"):
        raise bad_request(
            f"{where}: only data: URLs are accepted (the server fetches nothing from the "
            "network); send the image inline as data:image/png;base64,...",
            where,
            "unsupported_image_url",
        )
    header, _, payload = url.partition(",")
    if ";base64" not in header:
        raise bad_request(f"{where}: the data URL must be base64-encoded", where)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise bad_request(f"{where}: the data URL is not valid base64", where) from exc
    kind = header[5:].split(";")[0] or "image"
    return ImageFile(f"image-{index + 1}.{kind.rpartition('/')[2] or 'img'}", data)


def _assistant_tool_calls(value: Any, param: str) -> list[dict[str, Any]]:
    """An assistant turn's earlier tool calls, with arguments as objects (chat templates
    serialise them themselves)."""
    if not isinstance(value, list):
        raise bad_request(f"{param}.tool_calls must be an array", f"{param}.tool_calls")
    calls: list[dict[str, Any]] = []
    for call in value:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad_request(f"{param}.tool_calls: each needs function.name", param)
        arguments = function.get("arguments", "{}")
        if isinstance(arguments, str):
            with contextlib.suppress(json.JSONDecodeError):  # else kept as the client sent it
                arguments = json.loads(arguments or "{}")
        calls.append(
            {
                "id": call.get("id", ""),
                "type": "function",
                "function": {"name": function["name"], "arguments": arguments},
            }
        )
    return calls


def _tools(value: Any) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise bad_request("tools must be an array", "tools")
    for index, tool in enumerate(value):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(tool, dict)
            or tool.get("type") != "function"
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
        ):
            raise bad_request(
                f"tools[{index}] must be {{'type': 'function', 'function': {{'name': ...}}}}",
                f"tools[{index}]",
            )
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            where = f"tools[{index}].function.parameters"
            raise bad_request(f"{where} must be a JSON schema object", where)
    return tuple(value)


def _tool_choice(value: Any, tools: tuple[dict[str, Any], ...]) -> str | dict[str, Any]:
    if value in ("auto", "none", "required"):
        if value == "required" and not tools:
            raise bad_request("tool_choice 'required' needs tools", "tool_choice")
        return str(value)
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise bad_request(
            "tool_choice must be 'auto', 'none', 'required' or a named function", "tool_choice"
        )
    if name not in {t["function"]["name"] for t in tools}:
        raise bad_request(f"tool_choice names {name!r}, which is not in tools", "tool_choice")
    return {"type": "function", "function": {"name": name}}


def _thinking(body: dict[str, Any]) -> bool | None:
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and isinstance(kwargs.get("enable_thinking"), bool):
        return bool(kwargs["enable_thinking"])
    effort = body.get("reasoning_effort")
    if effort is not None:
        return effort not in ("none", "minimal")
    return None


def _grammar(value: Any) -> str | None:
    """GBNF for response_format; a schema llama.cpp's converter cannot express is a 400, never
    an unconstrained reply."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return _schema_grammar({"type": "object"})
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise bad_request(
                "response_format.json_schema.schema must be a JSON schema object",
                "response_format",
            )
        return _schema_grammar(schema)
    raise bad_request(
        "response_format.type must be text, json_object or json_schema", "response_format"
    )


def _schema_grammar(schema: dict[str, Any]) -> str:
    try:
        return schema_grammar(schema)
    except SchemaNotExpressible as exc:
        raise bad_request(
            f"response_format: the schema uses something the grammar cannot express ({exc})",
            "response_format",
            "unsupported_schema",
        ) from exc


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if (
        isinstance(value, list)
        and len(value) <= MAX_STOP_STRINGS
        and all(isinstance(s, str) for s in value)
    ):
        return tuple(value)
    raise bad_request(f"stop must be a string or up to {MAX_STOP_STRINGS} strings", "stop")


def request_object(body: Any) -> dict[str, Any]:
    """The body as an object whose text is all text (see _check_text); 400 if not."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    _check_text(body)
    return body


def _check_text(body: dict[str, Any]) -> None:
    """Refuse what valid JSON can hold but no prompt can: a lone UTF-16 surrogate ("\\ud800"),
    which has no UTF-8 form and would fail only inside the engine, and nesting deeper than
    MAX_NESTING, where the schema converter and the template would recurse too far.
    llama-server's JSON parser refuses a lone surrogate with a 400; so does this."""
    waiting: list[tuple[Any, str, int]] = [(body, "", 0)]
    while waiting:
        value, where, depth = waiting.pop()
        if depth > MAX_NESTING:
            field = re.split(r"[.\[]", where, maxsplit=1)[0]
            raise bad_request(f"{field} nests deeper than {MAX_NESTING} levels", field)
        if isinstance(value, str):
            _check_string(value, where)
        elif isinstance(value, dict):
            for key, item in value.items():
                path = f"{where}.{key}" if where else str(key)
                _check_string(key, f"a key in {where or 'the body'}")
                waiting.append((item, path, depth + 1))
        elif isinstance(value, list):
            waiting.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))


def _check_string(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise bad_request(
            f"{where} holds a lone UTF-16 surrogate ({text[exc.start]!a}), which is not text",
            where,
            "invalid_unicode",
        ) from exc


def _bool(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"{name} must be true or false", name)
    return value


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad_request(f"{name} must be a number", name)
    if not low <= value <= high:
        raise bad_request(f"{name} must be between {low:g} and {high:g}", name)
    return float(value)


def _int(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise bad_request(f"{name} must be an integer from {low} to {high}", name)
    return value


__all__ = [
    "API_DEFAULTS", "ApiCall", "ApiError", "ApiPrompt", "parse_chat", "parse_completion",
    "request_object",
]  # fmt: skip
