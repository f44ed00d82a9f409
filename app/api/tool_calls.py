"""Tool calls for the OpenAI-compatible server: the markup a model calls tools in, read back.

A model trained for tools calls them in the markup its chat template taught it: Hermes and
Qwen write `<tool_call>` blocks, Llama 3 a bare JSON object, Mistral `[TOOL_CALLS]`. OpenAI
clients expect `tool_calls` instead. So the server renders the tools through the model's own
template, reads the reply back in the format that template taught (whole, or while it
streams), and for tool_choice "required" or a named function constrains the reply with a
grammar written in that same markup, so the forced call is one the model knows how to write.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from engine.llama.schema_grammar import SchemaNotExpressible, schema_grammar


class ToolCallFormat(str, Enum):
    HERMES = "hermes"  # <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, repeated
    LLAMA3 = "llama3"  # {"name": ..., "parameters": {...}}, maybe after <|python_tag|>, ';' apart
    MISTRAL = (
        "mistral"  # [TOOL_CALLS][{"name": ..., "arguments": {...}}] or [TOOL_CALLS]name[ARGS]{}
    )


HERMES_OPENER = "<tool_call>"
MISTRAL_OPENER = "[TOOL_CALLS]"
PYTHON_TAG = "<|python_tag|>"

# the text every call of a format begins with; Llama 3's calls have none (they are the reply)
_OPENERS = {ToolCallFormat.HERMES: HERMES_OPENER, ToolCallFormat.MISTRAL: MISTRAL_OPENER}

_ID_ALPHABET = string.ascii_letters + string.digits


def format_for_template(template_source: str | None) -> ToolCallFormat | None:
    """The markup a chat template teaches its model to call tools in.

    Read from the template's own text because that is what the model saw in training;
    None when the template never renders `tools` (the model was never shown them) or
    teaches a markup this module cannot read back.
    """
    if not template_source or not re.search(r"\btools\b", template_source):
        return None
    if HERMES_OPENER in template_source:
        return ToolCallFormat.HERMES
    if MISTRAL_OPENER in template_source:
        return ToolCallFormat.MISTRAL
    if _teaches_llama3_json(template_source):
        return ToolCallFormat.LLAMA3
    return None


def _teaches_llama3_json(template_source: str) -> bool:
    if PYTHON_TAG in template_source:
        return True
    return "<|start_header_id|>" in template_source and (
        "Environment: ipython" in template_source or "parameters" in template_source
    )


@dataclass(frozen=True)
class ToolCall:
    """One call as OpenAI's `tool_calls` carries it; arguments stay JSON text, as clients expect."""

    id: str
    name: str
    arguments: str


def parse_tool_calls(text: str, fmt: ToolCallFormat) -> tuple[str, list[ToolCall]]:
    """The reply split into what to show as content and the calls it makes.

    Markup that does not hold a valid call stays in the content: showing the model's
    text is better than dropping it or inventing a call from it.
    """
    content, calls = _split_calls(text, fmt)
    return content.strip(), calls


def _split_calls(text: str, fmt: ToolCallFormat) -> tuple[str, list[ToolCall]]:
    """The content unstripped, so that a stream can join it to what it already showed."""
    return _SPLITTERS[fmt](text)


_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


def _split_hermes(text: str) -> tuple[str, list[ToolCall]]:
    content: list[str] = []
    calls: list[ToolCall] = []
    content_from = 0
    for block in _HERMES_BLOCK.finditer(text):
        call = _call_from_json_text(block.group(1))
        if call is None:
            continue
        content.append(text[content_from : block.start()])
        calls.append(call)
        content_from = block.end()
    content.append(text[content_from:])
    return "".join(content), calls


def _split_llama3(text: str) -> tuple[str, list[ToolCall]]:
    """Llama 3 calls only when the whole reply is calls; anything else is an answer."""
    body = text.strip()
    if body.startswith(PYTHON_TAG):
        body = body[len(PYTHON_TAG) :]
    calls = _semicolon_separated_calls(body)
    return ("", calls) if calls else (text, [])


def _semicolon_separated_calls(body: str) -> list[ToolCall]:
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    position = _skip_whitespace(body, 0)
    while position < len(body):
        try:
            value, position = decoder.raw_decode(body, position)
        except ValueError:
            return []
        call = _call_from_json(value)
        if call is None:
            return []
        calls.append(call)
        position = _skip_whitespace(body, position)
        if position < len(body):
            if body[position] != ";":
                return []
            position = _skip_whitespace(body, position + 1)
    return calls


# Mistral's newer form: [TOOL_CALLS]name[ARGS]{...}, some models with [CALL_ID]id before [ARGS]
_MISTRAL_NAMED_CALL = re.compile(r"(?P<name>[^\[\]{}\s]+)(?:\[CALL_ID\][^\[]*)?\[ARGS\]\s*")


def _split_mistral(text: str) -> tuple[str, list[ToolCall]]:
    before, *segments = text.split(MISTRAL_OPENER)
    content = [before]
    calls: list[ToolCall] = []
    for segment in segments:
        parsed = _mistral_segment(segment)
        if parsed is None:
            content.append(MISTRAL_OPENER + segment)
            continue
        segment_calls, tail = parsed
        calls.extend(segment_calls)
        content.append(tail)
    return "".join(content), calls


def _mistral_segment(segment: str) -> tuple[list[ToolCall], str] | None:
    """The calls after one [TOOL_CALLS] and the text following them; None if there are none."""
    decoder = json.JSONDecoder()
    body = segment.lstrip()
    named = _MISTRAL_NAMED_CALL.match(body)
    try:
        value, end = decoder.raw_decode(body, named.end() if named else 0)
    except ValueError:
        return None
    if named:
        if not isinstance(value, dict):
            return None
        return [_new_call(named["name"], value)], body[end:]
    listed = value if isinstance(value, list) else [value]
    calls = [_call_from_json(item) for item in listed]
    if not calls or None in calls:
        return None
    return [call for call in calls if call is not None], body[end:]


_SPLITTERS: dict[ToolCallFormat, Callable[[str], tuple[str, list[ToolCall]]]] = {
    ToolCallFormat.HERMES: _split_hermes,
    ToolCallFormat.LLAMA3: _split_llama3,
    ToolCallFormat.MISTRAL: _split_mistral,
}


def _call_from_json_text(text: str) -> ToolCall | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return _call_from_json(value)


def _call_from_json(value: object) -> ToolCall | None:
    """A call from {"name", "arguments" or "parameters"}; models write both keys, and some
    write the arguments as a JSON string instead of an object."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return _new_call(value["name"], arguments)


def _new_call(name: str, arguments: dict[str, Any]) -> ToolCall:
    call_id = "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))
    compact = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    return ToolCall(id=call_id, name=name, arguments=compact)


def _skip_whitespace(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


class ToolCallStream:
    """A reply read while it is generated: content shows as it comes, calls once complete.

    A client must never see call markup as content, and a call can be read only whole, so
    text is held back from anything that may open a call until it is clear it does not.
    Whitespace at either end of what has been shown is held too, so that the pieces shown
    plus finish()'s content are exactly parse_tool_calls' content.
    """

    def __init__(self, fmt: ToolCallFormat) -> None:
        self._fmt = fmt
        self._held = ""
        self._shown_any = False
        self._call_begun = False

    def feed(self, piece: str) -> str:
        """The content that is safe to show now."""
        self._held += piece
        if self._call_begun:
            return ""
        if not self._shown_any:
            self._held = self._held.lstrip()
        safe_length, self._call_begun = self._content_length()
        shown = self._held[:safe_length].rstrip()
        self._held = self._held[len(shown) :]
        self._shown_any = self._shown_any or bool(shown)
        return shown

    def finish(self) -> tuple[str, list[ToolCall]]:
        """The content still held back and the calls, once the reply is complete."""
        content, calls = _split_calls(self._held, self._fmt)
        self._held = ""
        return (content.rstrip() if self._shown_any else content.strip()), calls

    def _content_length(self) -> tuple[int, bool]:
        """How much of the held text cannot belong to a call, and whether a call has begun."""
        if self._fmt is ToolCallFormat.LLAMA3:
            return self._llama3_content_length()
        opener = _OPENERS[self._fmt]
        call_start = self._held.find(opener)
        if call_start >= 0:
            return call_start, True
        return len(self._held) - _partial_opener_length(self._held, opener), False

    def _llama3_content_length(self) -> tuple[int, bool]:
        """A Llama 3 call is the whole reply, so only the reply's start decides."""
        if self._shown_any:
            return len(self._held), False
        if self._held.startswith(("{", PYTHON_TAG)):
            return 0, True
        if PYTHON_TAG.startswith(self._held):
            return 0, False
        return len(self._held), False


def _partial_opener_length(text: str, opener: str) -> int:
    """How many of text's last characters could be the first ones of opener."""
    for size in range(min(len(opener) - 1, len(text)), 0, -1):
        if text.endswith(opener[:size]):
            return size
    return 0


# the key a format's calls carry their arguments under, as the model's template teaches
_ARGUMENTS_KEY = {
    ToolCallFormat.HERMES: "arguments",
    ToolCallFormat.LLAMA3: "parameters",
    ToolCallFormat.MISTRAL: "arguments",
}
_CALL_RULE = "one-tool-call"
# the call wrapped in its format's markup (GBNF); the format's stop token ends the reply
_ROOT_RULE = {
    ToolCallFormat.HERMES: rf'"<tool_call>\n" {_CALL_RULE} "\n</tool_call>"',
    ToolCallFormat.LLAMA3: _CALL_RULE,
    ToolCallFormat.MISTRAL: rf'"[TOOL_CALLS][" {_CALL_RULE} "]"',
}
_DEFINITION_KEYS = ("$defs", "definitions")


def tool_call_grammar(
    tools: list[dict[str, Any]], fmt: ToolCallFormat, required_name: str | None = None
) -> str:
    """GBNF that lets the model answer only with one call, in its own markup, to one of the
    tools (or to required_name's), with arguments that follow that tool's parameters.

    Serves tool_choice "required" and a named function, where a reply without the call
    would break the client's contract. Raises ValueError when a tool's parameters use
    a schema feature the grammar converter cannot express.
    """
    schema = _one_call_schema(_chosen_functions(tools, required_name), _ARGUMENTS_KEY[fmt])
    try:
        call_grammar = schema_grammar(schema)
    except SchemaNotExpressible as exc:
        raise ValueError(f"the tools' parameters cannot be enforced by a grammar: {exc}") from exc
    return f"root ::= {_ROOT_RULE[fmt]}\n{_renamed_root(call_grammar, _CALL_RULE)}\n"


def _chosen_functions(
    tools: list[dict[str, Any]], required_name: str | None
) -> list[dict[str, Any]]:
    functions: list[dict[str, Any]] = []
    for tool in tools:
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError("every tool needs a function with a name")
        if required_name is None or function["name"] == required_name:
            functions.append(function)
    if not functions:
        raise ValueError(f"no tool is named {required_name!r}" if required_name else "no tools")
    return functions


def _one_call_schema(functions: list[dict[str, Any]], arguments_key: str) -> dict[str, Any]:
    """One JSON schema for a call to any of the functions, their parameters as its `$defs`."""
    alternatives: list[dict[str, Any]] = []
    definitions: dict[str, Any] = {}
    for function in functions:
        prefix = re.sub(r"[^A-Za-z0-9]+", "-", function["name"])
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        definitions.update(_hoisted_parameters(parameters, prefix))
        arguments = {"$ref": f"#/$defs/{prefix}-arguments"}
        alternatives.append(
            {
                "type": "object",
                "properties": {"name": {"const": function["name"]}, arguments_key: arguments},
                "required": ["name", arguments_key],
            }
        )
    return {"anyOf": alternatives, "$defs": definitions}


def _hoisted_parameters(parameters: dict[str, Any], prefix: str) -> dict[str, Any]:
    """One tool's parameters and their `$defs`, as definitions of the joined schema.

    A `$ref` inside them pointed into this tool's schema and must now point to where it
    went; its `$defs` get the tool's prefix because the converter names a rule after the
    last part of a `$ref`, and two tools may each define a `Location`.
    """
    own = {key: value for key, value in parameters.items() if key not in _DEFINITION_KEYS}
    hoisted = {f"{prefix}-arguments": _rebased(own, prefix)}
    for section in _DEFINITION_KEYS:
        for name, definition in (parameters.get(section) or {}).items():
            hoisted[f"{prefix}-{name}"] = _rebased(definition, prefix)
    return hoisted


def _rebased(node: Any, prefix: str) -> Any:
    if isinstance(node, list):
        return [_rebased(item, prefix) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: _rebased_ref(value, prefix)
        if key == "$ref" and isinstance(value, str)
        else _rebased(value, prefix)
        for key, value in node.items()
    }


def _rebased_ref(ref: str, prefix: str) -> str:
    for section in _DEFINITION_KEYS:
        if ref.startswith(f"#/{section}/"):
            return f"#/$defs/{prefix}-{ref[len(section) + 3 :]}"
    if ref == "#" or ref.startswith("#/"):
        return f"#/$defs/{prefix}-arguments{ref[1:]}"
    return ref


def _renamed_root(grammar: str, name: str) -> str:
    """The converter's grammar with its root renamed, so our markup can wrap it."""
    lines = grammar.splitlines()
    return "\n".join(
        f"{name} ::= {line.removeprefix('root ::= ')}" if line.startswith("root ::= ") else line
        for line in lines
    )
