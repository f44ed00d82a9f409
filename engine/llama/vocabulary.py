"""What a model's vocabulary says about its prompt format, read through llama.cpp.

The prompt format follows the GGUF's chat template, else the chat markers its
vocabulary holds as special tokens (engine.model.prompt_format). llama.cpp
knows which tokens are special (control or user-defined) better than a second
reading of the file would, and a vocabulary-only load takes a fraction of a
second, so `shardchat info` decides exactly as a loaded model does.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import llama_cpp

from engine.errors import ModelFileError
from engine.llama import backends
from engine.llama import log_capture as llama_log

_SPECIAL = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED


@dataclass(frozen=True)
class VocabularyFacts:
    """A model's own chat template, its BOS and EOS texts, and which asked-about texts are
    single special tokens of its vocabulary."""

    chat_template: str | None
    bos_token: str
    eos_token: str
    special_tokens: frozenset[str]


def vocabulary_facts(
    model: llama_cpp.llama_model_p, vocab: llama_cpp.llama_vocab_p, candidates: Iterable[str]
) -> VocabularyFacts:
    template = llama_cpp.llama_model_chat_template(model, None)
    if llama_cpp.llama_vocab_type(vocab) == llama_cpp.LLAMA_VOCAB_TYPE_NONE:
        candidates = ()  # no tokenizer at all (profiler micro-models): llama_tokenize aborts
    return VocabularyFacts(
        chat_template=template.decode("utf-8", errors="replace") if template else None,
        bos_token=_token_text(vocab, llama_cpp.llama_vocab_bos(vocab)),
        eos_token=_token_text(vocab, llama_cpp.llama_vocab_eos(vocab)),
        special_tokens=frozenset(t for t in candidates if is_special_token(vocab, t)),
    )


def is_special_token(vocab: llama_cpp.llama_vocab_p, text: str) -> bool:
    """`text` tokenizes (special tokens parsed) as one control or user-defined token."""
    encoded = text.encode("utf-8")
    tokens = (llama_cpp.llama_token * 2)()
    count = llama_cpp.llama_tokenize(vocab, encoded, len(encoded), tokens, 2, False, True)
    if count != 1:
        return False
    return bool(llama_cpp.llama_vocab_get_attr(vocab, tokens[0]) & _SPECIAL) and (
        _token_text(vocab, tokens[0]) == text
    )


def longest_token_bytes(vocab: llama_cpp.llama_vocab_p) -> int:
    """The most bytes of text one token stands for, so a server can tell a prompt too long
    for the context from its length alone. A token's stored text is never shorter than the
    text it decodes to (byte-level BPE writes a byte as one or two bytes, SentencePiece a
    space as three), so this bounds it from above; about 0.3 s per 100k tokens, once per load.
    0 for a model without a vocabulary."""
    if llama_cpp.llama_vocab_type(vocab) == llama_cpp.LLAMA_VOCAB_TYPE_NONE:
        return 0
    count = llama_cpp.llama_vocab_n_tokens(vocab)
    return max(
        (len(llama_cpp.llama_vocab_get_text(vocab, token) or b"") for token in range(count)),
        default=0,
    )


def read_vocabulary(path: str | os.PathLike[str], candidates: Iterable[str]) -> VocabularyFacts:
    """VocabularyFacts of a GGUF file, loading only its vocabulary (no weights)."""
    with _vocabulary_only(path) as model:
        vocab = llama_cpp.llama_model_get_vocab(model)
        if vocab is None:
            raise ModelFileError(f"{path}: llama.cpp found no vocabulary in the model")
        return vocabulary_facts(model, vocab, candidates)


@contextlib.contextmanager
def _vocabulary_only(path: str | os.PathLike[str]) -> Iterator[llama_cpp.llama_model_p]:
    llama_log.install()
    backends.start_ggml()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    with llama_log.errors_logged() as errors:
        model = llama_cpp.llama_model_load_from_file(os.fsencode(path), params)
    if model is None:
        why = f": {errors.reason}" if errors.reason else ""
        raise ModelFileError(f"{path}: llama.cpp could not read the model's vocabulary{why}")
    try:
        yield model
    finally:
        llama_cpp.llama_model_free(model)


def _token_text(vocab: llama_cpp.llama_vocab_p, token: int) -> str:
    if token < 0:
        return ""
    text: bytes = llama_cpp.llama_vocab_get_text(vocab, token)
    return text.decode("utf-8", errors="replace")
