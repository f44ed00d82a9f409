"""A conversation with the resident model: history in, streamed reply out.

The session keeps the whole history; what the model sees each turn is the
part that fits the context window (see `context_window`). Because the
prompt of turn n+1 starts with the prompt of turn n, llama.cpp reuses the
KV cache of the shared prefix and only the new turn is evaluated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from engine.cancel import CancelToken
from engine.chat_template import ChatMessage
from engine.context_window import fit_messages
from engine.generation import stream_generate
from engine.generation_stats import FinishReason, GenerationResponse, GenerationStats
from engine.runtime import LoadedModel
from engine.sampling import SamplingSettings


@dataclass(frozen=True)
class ChatReply:
    """The assistant's whole reply to one user message."""

    text: str
    stats: GenerationStats
    dropped_messages: int

    @property
    def finish_reason(self) -> FinishReason:
        return self.stats.finish_reason


class ChatSession:
    """One conversation bound to a loaded model."""

    def __init__(
        self,
        model: LoadedModel,
        system_prompt: str | None = None,
        history: Sequence[ChatMessage] = (),
    ) -> None:
        self.model = model
        self.messages: list[ChatMessage] = list(history)
        # The model's KV cache may hold another conversation: start this one clean.
        self._continues_in_cache = False
        if system_prompt and not (self.messages and self.messages[0].role == "system"):
            self.messages.insert(0, ChatMessage("system", system_prompt))

    def stream_reply(
        self, user_text: str, settings: SamplingSettings, cancel: CancelToken
    ) -> Iterator[tuple[GenerationResponse, int]]:
        """Stream the reply to `user_text`; each item carries how many old messages were left out.

        The user message joins the history only once the prompt fits, and the
        reply (even a cancelled, partial one) joins it when streaming ends.
        """
        candidate = [*self.messages, ChatMessage("user", user_text)]
        fitted = fit_messages(
            candidate, self.model.count_tokens, self.model.n_ctx, settings.max_tokens
        )
        rendered = self.model.chat_template.render(fitted.messages)
        tokens = self.model.tokenize_prompt(rendered)
        self.messages = candidate
        pieces: list[str] = []
        stream = stream_generate(
            self.model.llm, tokens, settings, cancel, rendered.stop, self._continues_in_cache
        )
        self._continues_in_cache = True
        for response in stream:
            pieces.append(response.text)
            yield response, fitted.dropped_messages
        if "".join(pieces):
            self.messages.append(ChatMessage("assistant", "".join(pieces)))

    def reply(
        self,
        user_text: str,
        settings: SamplingSettings,
        cancel: CancelToken | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> ChatReply:
        """Generate the whole reply, passing each new piece of text to `on_text`."""
        pieces: list[str] = []
        dropped = 0
        stats: GenerationStats | None = None
        stream = self.stream_reply(user_text, settings, cancel or CancelToken())
        for response, dropped_now in stream:
            dropped = dropped_now
            if response.text:
                pieces.append(response.text)
                if on_text is not None:
                    on_text(response.text)
            stats = response.stats or stats
        assert stats is not None  # stream_generate always ends with the statistics
        return ChatReply("".join(pieces), stats, dropped)
