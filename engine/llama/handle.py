"""The llama.cpp pointers behind a loaded `llama_cpp.Llama`, in one place.

llama-cpp-python loads the model and creates its context for us (tensor
overrides, mmap, every context parameter), but its high-level `Llama` keeps
the raw pointers in private attributes and decodes with a token loop of its
own. ShardChat decodes with its own scheduler on those pointers, so this is
the one module that reads the privates; everything else asks the handle.
"""

from __future__ import annotations

from dataclasses import dataclass

import llama_cpp


@dataclass(frozen=True)
class LlamaHandle:
    """Model, context and vocabulary pointers of one `Llama`; they live as long as it does."""

    model: llama_cpp.llama_model_p
    context: llama_cpp.llama_context_p
    vocab: llama_cpp.llama_vocab_p

    @classmethod
    def of(cls, llm: llama_cpp.Llama) -> LlamaHandle:
        return cls(llm._model.model, llm._ctx.ctx, llm._model.vocab)

    @property
    def n_vocab(self) -> int:
        return int(llama_cpp.llama_vocab_n_tokens(self.vocab))

    @property
    def n_ctx(self) -> int:
        return int(llama_cpp.llama_n_ctx(self.context))

    @property
    def n_embd_inp(self) -> int:
        return int(llama_cpp.llama_model_n_embd_inp(self.model))

    @property
    def n_threads_batch(self) -> int:
        return int(llama_cpp.llama_n_threads_batch(self.context))

    def is_end_of_generation(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def wants_bos(self) -> bool:
        """The vocabulary asks for a BOS token at the start of a prompt."""
        return bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
