"""JSON schemas as GBNF grammars: how a reply is held to JSON of a given shape.

llama-cpp-python's converter (`llama_cpp.llama_grammar`) does the work. It is
reached through here so that app/ never calls llama_cpp itself, and so that the
many ways it fails on a schema it cannot read (it assumes well-formed input: a
number where a list belongs fails anywhere inside it) become one refusal that
names the reason, never a reply left unconstrained.
"""

from __future__ import annotations

import json
from typing import Any

from llama_cpp.llama_grammar import json_schema_to_gbnf

from engine.errors import BadInputError

# what the converter (and json.dumps before it) raise on a schema they cannot read
_CONVERTER_ERRORS = (
    AssertionError, AttributeError, IndexError, KeyError, NotImplementedError, OverflowError,
    RecursionError, TypeError, ValueError,
)  # fmt: skip
_MAX_REASON_CHARS = 200


class SchemaNotExpressible(BadInputError):
    """The schema uses something a grammar cannot express (or is not a readable schema);
    the message is the converter's reason, in one line."""


def schema_grammar(schema: dict[str, Any]) -> str:
    """The GBNF grammar (its root rule named `root`) that lets a model write only JSON
    following `schema`. SchemaNotExpressible when the converter cannot express it."""
    try:
        return str(json_schema_to_gbnf(json.dumps(schema)))
    except _CONVERTER_ERRORS as exc:
        reason = " ".join(str(exc).split())[:_MAX_REASON_CHARS] or type(exc).__name__
        raise SchemaNotExpressible(reason) from exc
