"""Synthetic models whose general.* keys say, as real GGUFs do, "base model" or "chat model".

Each is the tiny template-less llama with Gemma's turn markers in its vocabulary
(tests/synthetic_vocab.py), rewritten with the keys llama.cpp's converter writes
for Gemma 3 270M: `gemma-3-270m` becomes basename "gemma-3", size label "270M"
and no finetune; `gemma-3-270m-it` the same with finetune "it". Without the
base-model rule both get Gemma's turn format from their vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from tests.engine.gguf_mutations import VT, Value, rewritten
from tests.synthetic_vocab import marker_vocabulary

GEMMA_MARKERS = ("<start_of_turn>", "<end_of_turn>")
_GEMMA_3_270M = {
    "general.name": "Gemma 3 270m",
    "general.basename": "gemma-3",
    "general.size_label": "270M",
}
GENERAL_FIELDS: dict[str, Mapping[str, str | list[str]]] = {
    # google/gemma-3-270m as converted: no finetune part in its id
    "base": _GEMMA_3_270M,
    # google/gemma-3-270m-it: the finetune part "it"
    "finetune-it": {**_GEMMA_3_270M, "general.name": "Gemma 3 270m It", "general.finetune": "it"},
    # a base-looking name whose tags say it was instruction-tuned
    "tagged-instruct": {**_GEMMA_3_270M, "general.tags": ["gemma3", "instruct"]},
    # an older converter's file: a name and nothing else to go by
    "name-only": {"general.name": "gemma 270m"},
}


def purpose_model(make_synthetic: Callable[..., Path], folder: Path, kind: str) -> Path:
    """The Gemma-vocabulary model with GENERAL_FIELDS[kind] written into its header."""
    source = make_synthetic("llama", **marker_vocabulary(GEMMA_MARKERS))
    target = folder / f"gemma-vocab-{kind}.gguf"
    if not target.exists():
        rewritten(source, target, _changes(GENERAL_FIELDS[kind]))
    return target


def _changes(fields: Mapping[str, str | list[str]]) -> dict[str, Value]:
    changes: dict[str, Value] = {}
    for key, value in fields.items():
        if isinstance(value, list):
            changes[key] = (value, VT.ARRAY, VT.STRING)
        else:
            changes[key] = (value, VT.STRING)
    return changes
