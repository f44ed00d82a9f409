"""Keeping a conversation inside the model's context window.

When the history no longer fits, the oldest turns leave the prompt first; the
system prompt and the newest user message always stay. The history itself is
not changed: the caller decides what to show, the model sees what fits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from engine.errors import ContextOverflowError
from engine.model.chat_message import ChatMessage

MIN_REPLY_TOKENS = 16
Prompt = TypeVar("Prompt")


@dataclass(frozen=True)
class FittedPrompt(Generic[Prompt]):
    """The messages that fit, their token count, how many old messages were left out,
    and the prompt `measure` made of them (kept, so the turn does not make it twice)."""

    messages: tuple[ChatMessage, ...]
    n_tokens: int
    dropped_messages: int
    prompt: Prompt


def fit_messages(
    messages: Sequence[ChatMessage],
    measure: Callable[[Sequence[ChatMessage]], tuple[int, Prompt]],
    n_ctx: int,
    reply_tokens: int,
) -> FittedPrompt[Prompt]:
    """Drop the oldest non-system turns until the prompt leaves room for a reply.

    `measure` makes the prompt of some messages (rendered and tokenized) and says how
    many tokens it takes. `reply_tokens` is the room we would like to keep for the
    answer; if even the last message alone leaves less than that, we settle for
    MIN_REPLY_TOKENS, and refuse only when that does not fit either.
    """
    system = [m for m in messages[:1] if m.role == "system"]
    turns = list(messages[len(system) :])
    budget = n_ctx - min(reply_tokens, max(n_ctx // 2, MIN_REPLY_TOKENS))
    dropped = 0
    while True:
        candidate = (*system, *turns)
        n_tokens, prompt = measure(candidate)
        if n_tokens <= budget or (len(turns) == 1 and n_tokens <= n_ctx - MIN_REPLY_TOKENS):
            return FittedPrompt(candidate, n_tokens, dropped, prompt)
        if len(turns) <= 1:
            raise ContextOverflowError(
                f"the message is too long for the context window ({n_tokens} tokens, window "
                f"{n_ctx}); shorten it or load the model with a larger context"
            )
        dropped += _drop_oldest_exchange(turns)


def _drop_oldest_exchange(turns: list[ChatMessage]) -> int:
    """Remove the oldest turn and any replies to it, so the prompt still opens with a user turn.

    Templates such as Gemma's refuse a conversation that does not alternate
    user/assistant, so an assistant turn never leads.
    """
    removed = 0
    while len(turns) > 1 and (removed == 0 or turns[0].role != "user"):
        turns.pop(0)
        removed += 1
    return removed
