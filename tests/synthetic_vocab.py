"""Synthetic vocabularies that carry a chat format's turn markers and no chat template.

Real GGUFs sometimes lose their `tokenizer.chat_template` while their
vocabulary still holds the format's markers as special tokens; the prompt
format is then chosen from the vocabulary (engine.model.prompt_format). To
test that choice on real llama.cpp tokenizers, a synthetic model copies the
default model's tokenizer (GPT-2 BPE, merges kept) and:

- appends the wanted markers it lacks as CONTROL tokens (the copy has no
  token scores to extend),
- renames its own ChatML markers (<|im_start|>, <|im_end|>) when they are not
  wanted, keeping their ids and types, so the vocabulary holds no other family,
- writes no chat template.
"""

from __future__ import annotations

# The copied tokenizer's own chat markers (ids 1 and 2, BOS and EOS) and their plain names.
DEFAULT_VOCABULARY_MARKERS = {
    "<|im_start|>": "<|synthetic_reserved_1|>",
    "<|im_end|>": "<|synthetic_reserved_2|>",
}


def marker_vocabulary(markers: tuple[str, ...]) -> dict[str, object]:
    """SyntheticSpec fields for a template-less vocabulary holding exactly these chat markers
    (of the copied tokenizer's, and of prompt_format's families); () holds none."""
    kept = set(markers)
    return {
        "extra_tokens": tuple(m for m in markers if m not in DEFAULT_VOCABULARY_MARKERS),
        "renamed_tokens": tuple(
            (old, new) for old, new in DEFAULT_VOCABULARY_MARKERS.items() if old not in kept
        ),
        "chat_template": "",
    }
