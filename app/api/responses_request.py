"""A Responses API request body (POST /v1/responses), turned into the chat request it asks.

OpenAI's newer clients speak the Responses API: `input` (a string, or a list of
message and tool-call items), `instructions`, `max_output_tokens`, `text.format`,
flat function tools. Each is translated into what /v1/chat/completions takes and
parsed by the same `parse_chat`, so both endpoints share every check and run on
the same engine; a refusal names the Responses field the client sent (input[2],
max_output_tokens), not the chat field it became. What the server cannot do is
a 400 that says so: stored responses (previous_response_id, conversation,
background runs), tools that run on OpenAI's servers, files, truncation.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from app.api.api_errors import ApiError, bad_request
from app.api.openai_request import ApiCall, parse_chat, request_object

# fields whose meaning is the same in both APIs (the last ones are llama-server's extensions)
_PASSED = (
    "model", "temperature", "top_p", "stream", "seed", "top_k", "min_p", "repeat_penalty",
    "presence_penalty", "frequency_penalty", "chat_template_kwargs",
)  # fmt: skip
_STORED = "the server keeps no responses: send the whole conversation as input"
_REFUSED = {
    "previous_response_id": _STORED,
    "conversation": _STORED,
    "prompt": "stored prompt templates are not served: send their text as instructions",
}
_ROLES = ("user", "system", "developer", "assistant")
_RENAMED = {  # chat fields back to the Responses fields they came from
    "max_tokens": "max_output_tokens",
    "response_format": "text.format",
    "reasoning_effort": "reasoning.effort",
    "logprobs": "top_logprobs",
}
_INCLUDABLE = {
    "message.output_text.logprobs",  # served: the output text's logprobs
    "reasoning.encrypted_content",  # nothing to encrypt: the reasoning is sent as text
}


def parse_responses(body: Any) -> ApiCall:
    """POST /v1/responses: the chat call it asks for (streamed or not, one choice)."""
    body = request_object(body)
    _refuse_unsupported(body)
    messages, sources = _instructions(body.get("instructions"))
    more, more_sources = _input(body.get("input"))
    chat: dict[str, Any] = {name: body[name] for name in _PASSED if name in body}
    chat["messages"], sources = messages + more, sources + more_sources
    chat["max_tokens"] = _positive(body, "max_output_tokens")
    chat["response_format"] = _text_format(body.get("text"))
    chat["tools"] = _tools(body.get("tools"))
    chat["tool_choice"] = _tool_choice(body.get("tool_choice"))
    chat["reasoning_effort"] = _effort(body.get("reasoning"))
    chat["logprobs"], chat["top_logprobs"] = _logprobs(body)
    try:
        call = parse_chat(chat)
    except ApiError as exc:
        raise _renamed(exc, sources) from exc
    return dataclasses.replace(
        call,
        timings=_flag(body, "timings_per_token"),
        progress=_flag(body, "return_progress"),
    )


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for name, why in _REFUSED.items():
        if body.get(name) is not None:
            raise bad_request(f"{name} is not supported: {why}", name, "unsupported_parameter")
    if body.get("background"):
        raise bad_request(
            "background responses are not supported: the server keeps no responses; "
            "stream the response instead", "background", "unsupported_parameter",
        )  # fmt: skip
    if body.get("truncation") not in (None, "disabled"):
        raise bad_request(
            "truncation must be 'disabled': the server never drops input to make it fit "
            "(a prompt too long for the context is refused)", "truncation",
            "unsupported_parameter",
        )  # fmt: skip
    include = body.get("include")
    if include is not None:
        if not isinstance(include, list) or not all(isinstance(i, str) for i in include):
            raise bad_request("include must be an array of strings", "include")
        unknown = sorted(set(include) - _INCLUDABLE)
        if unknown:
            raise bad_request(
                f"include: {', '.join(unknown)} cannot be served (only "
                f"{', '.join(sorted(_INCLUDABLE))})", "include", "unsupported_parameter",
            )  # fmt: skip


def _instructions(value: Any) -> tuple[list[dict[str, Any]], list[str]]:
    if value is None:
        return [], []
    if not isinstance(value, str):
        raise bad_request("instructions must be a string", "instructions")
    return [{"role": "system", "content": value}], ["instructions"]


def _input(value: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """Chat messages from `input`, and for each the input field it came from. Consecutive
    assistant items (reasoning, a message, function calls: one turn) become one message."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}], ["input"]
    if not isinstance(value, list) or not value:
        raise bad_request("input must be a string or a non-empty array of items", "input")
    messages: list[dict[str, Any]] = []
    sources: list[str] = []
    for index, item in enumerate(value):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise bad_request(f"{where} must be an object", where)
        message = _item(item, where)
        previous = messages[-1] if messages else None
        if message["role"] == "assistant" and previous and previous["role"] == "assistant":
            _merge(previous, message)
            continue
        messages.append(message)
        sources.append(where)
    return messages, sources


def _item(item: dict[str, Any], where: str) -> dict[str, Any]:
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in _ROLES:
            raise bad_request(f"{where}.role must be one of {list(_ROLES)}", f"{where}.role")
        return {"role": role, "content": _content(item.get("content"), where, role)}
    if kind == "function_call":
        fields = {name: item.get(name) for name in ("call_id", "name", "arguments")}
        if not all(isinstance(v, str) for v in fields.values()):
            raise bad_request(f"{where}: a function_call needs call_id, name and arguments", where)
        function = {"name": fields["name"], "arguments": fields["arguments"]}
        call = {"id": fields["call_id"], "type": "function", "function": function}
        return {"role": "assistant", "content": "", "tool_calls": [call]}
    if kind == "function_call_output":
        call_id, output = item.get("call_id"), item.get("output")
        if isinstance(output, list):
            output = _text_parts(output, f"{where}.output")
        if not isinstance(call_id, str) or not isinstance(output, str):
            raise bad_request(f"{where}: a function_call_output needs call_id and output", where)
        return {"role": "tool", "tool_call_id": call_id, "content": output}
    if kind == "reasoning":
        content = item.get("content")
        parts = content if isinstance(content, list) else []
        text = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
        return {"role": "assistant", "content": "", "reasoning_content": str(text)}
    if kind == "item_reference":
        raise bad_request(f"{where}: item_reference is not supported: {_STORED}", where)
    raise bad_request(
        f"{where}.type must be message, function_call, function_call_output or reasoning",
        f"{where}.type",
    )


def _content(value: Any, where: str, role: str) -> str | list[dict[str, Any]]:
    """A message's content as chat parts: input_text/output_text as text, input_image (a
    data: URL, in a user message) as image_url."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise bad_request(f"{where}.content must be a string or an array of parts", where)
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(value):
        at = f"{where}.content[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append({"type": "text", "text": part["refusal"]})
        elif kind == "input_image" and role == "user":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise bad_request(
                    f"{at}: input_image needs image_url, a data: URL (file_id is not served)",
                    at,
                )
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif kind == "input_file":
            raise bad_request(
                f"{at}: input_file is not supported: send the document's text as input_text", at
            )
        else:
            raise bad_request(
                f"{at} must be an input_text part (or, in a user message, an input_image part)",
                at,
            )
    return parts


def _text_parts(value: list[Any], where: str) -> str:
    texts = [p.get("text") for p in value if isinstance(p, dict)]
    if len(texts) != len(value) or not all(isinstance(t, str) for t in texts):
        raise bad_request(f"{where} must be a string or an array of input_text parts", where)
    return "".join(str(t) for t in texts)


def _merge(turn: dict[str, Any], more: dict[str, Any]) -> None:
    """One assistant turn of several items: texts joined, tool calls and reasoning kept."""
    text = _plain(more.get("content"))
    if text:
        turn["content"] = _plain(turn.get("content")) + text
    if more.get("tool_calls"):
        turn["tool_calls"] = [*turn.get("tool_calls", []), *more["tool_calls"]]
    if more.get("reasoning_content"):
        turn["reasoning_content"] = more["reasoning_content"]


def _plain(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content or ""


def _positive(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise bad_request(f"{name} must be a positive integer", name)
    return value


def _text_format(text: Any) -> dict[str, Any] | None:
    """`text.format` as chat's response_format (json_schema's fields sit one level up)."""
    if text is None:
        return None
    if not isinstance(text, dict):
        raise bad_request("text must be an object", "text")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind in ("text", "json_object"):
        return {"type": kind}
    if kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise bad_request("text.format.schema must be a JSON schema object", "text.format")
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name"), "schema": schema}}
    raise bad_request("text.format.type must be text, json_object or json_schema", "text.format")


def _tools(value: Any) -> list[dict[str, Any]] | None:
    """Flat function tools as chat's; the tools OpenAI runs itself are refused by name."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise bad_request("tools must be an array", "tools")
    tools = []
    for index, tool in enumerate(value):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise bad_request(
                f"tools[{index}]: only function tools are served ({kind!r} is a tool OpenAI "
                "runs on its own servers)", f"tools[{index}]", "unsupported_tool",
            )  # fmt: skip
        assert isinstance(tool, dict)
        function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(value: Any) -> Any:
    if isinstance(value, dict) and value.get("type") == "function" and "name" in value:
        return {"type": "function", "function": {"name": value["name"]}}
    return value  # auto, none, required; anything else is refused as chat's tool_choice


def _effort(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_request("reasoning must be an object", "reasoning")
    effort = value.get("effort")
    if effort is not None and not isinstance(effort, str):
        raise bad_request("reasoning.effort must be a string", "reasoning.effort")
    return effort


def _logprobs(body: dict[str, Any]) -> tuple[bool, Any]:
    """(logprobs, top_logprobs) for chat: asked by include or by top_logprobs."""
    top = body.get("top_logprobs")
    wanted = "message.output_text.logprobs" in (body.get("include") or []) or top is not None
    return wanted, (top if wanted else None)


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise bad_request(f"{name} must be true or false", name)
    return bool(value)


def _renamed(error: ApiError, sources: list[str]) -> ApiError:
    """A refusal of the chat request, naming the Responses field it came from."""
    param, message = error.param, error.message
    found = re.match(r"messages\[(\d+)\]", param or "")
    if found and int(found.group(1)) < len(sources):
        origin = sources[int(found.group(1))]
        param = origin + (param or "")[found.end() :]
        message = message.replace(found.group(0), origin)
    elif param in _RENAMED:
        message = message.replace(param, _RENAMED[param], 1)
        param = _RENAMED[param]
    return dataclasses.replace(error, param=param, message=message)
