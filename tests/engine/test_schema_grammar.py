"""JSON schemas as grammars (engine.llama.schema_grammar): a grammar, or one clear refusal."""

from __future__ import annotations

from typing import Any

import pytest

from engine.errors import BadInputError
from engine.llama.schema_grammar import SchemaNotExpressible, schema_grammar

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def test_a_schema_becomes_a_grammar_with_a_root_rule_naming_its_fields() -> None:
    rules = dict(line.split(" ::= ", 1) for line in schema_grammar(WEATHER).splitlines())
    assert rules["root"].startswith('"{" space city-kv')  # city required, days may follow
    assert rules["city-kv"].endswith("string") and rules["days-kv"].endswith("integer")


# schemas the converter cannot read: each failed its own way (AssertionError, AttributeError,
# TypeError, RecursionError), all one refusal now
UNREADABLE: list[Any] = [
    {"type": "object", "properties": {"choice": {"not": {"type": "string"}}}},
    {"type": "object", "properties": 5},
    {"type": "array", "items": 7},
    {"$ref": "#/$defs/missing"},
    {"type": "object", "properties": {"a": {"enum": 3}}},
    {"anyOf": "text"},
    {"type": "object", "required": 4, "properties": {"a": {"type": "string"}}},
    nested(5000),
]


@pytest.mark.parametrize("schema", UNREADABLE, ids=[str(i) for i in range(len(UNREADABLE))])
def test_a_schema_the_converter_cannot_read_is_one_refusal_in_one_line(schema: Any) -> None:
    with pytest.raises(SchemaNotExpressible) as refused:
        schema_grammar(schema)
    assert isinstance(refused.value, BadInputError)
    message = str(refused.value)
    assert message and "\n" not in message and len(message) <= 200
