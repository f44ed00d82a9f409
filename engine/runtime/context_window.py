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
    """Drop the fewest oldest non-system turns that leave room in the prompt for a reply.

    `measure` makes the prompt of some messages (rendered and tokenized) and says how
    many tokens it takes. `reply_tokens` is the room we would like to keep for the
    answer; if even the last message alone leaves less than that, we settle for
    MIN_REPLY_TOKENS, and refuse only when that does not fit either.
    """
    system = [m for m in messages[:1] if m.role == "system"]
    turns = list(messages[len(system) :])
    budget = n_ctx - min(reply_tokens, max(n_ctx // 2, MIN_REPLY_TOKENS))
    cuts = _cuts(turns)

    def measured(cut: int) -> tuple[int, FittedPrompt[Prompt]]:
        candidate = (*system, *turns[cut:])
        n_tokens, prompt = measure(candidate)
        return n_tokens, FittedPrompt(candidate, n_tokens, cut, prompt)

    def fits(n_tokens: int, cut: int) -> bool:
        alone = cut == len(turns) - 1  # the newest message by itself may use the reply's room
        return n_tokens <= budget or (alone and n_tokens <= n_ctx - MIN_REPLY_TOKENS)

    n_tokens, whole = measured(0)
    if fits(n_tokens, 0):
        return whole
    n_tokens, last = measured(cuts[-1])
    if not fits(n_tokens, cuts[-1]):
        raise ContextOverflowError(
            f"the message is too long for the context window ({n_tokens} tokens, window "
            f"{n_ctx}); shorten it or load the model with a larger context"
        )
    # the fewest exchanges left out: fewer tokens with every one dropped, so a bisection
    # (a long history measured log2(n) times, not once per exchange dropped)
    low, high, best = 0, len(cuts) - 1, last  # cuts[low] does not fit, cuts[high] does
    while high - low > 1:
        middle = (low + high) // 2
        n_tokens, fitted = measured(cuts[middle])
        if fits(n_tokens, cuts[middle]):
            high, best = middle, fitted
        else:
            low = middle
    return best


def _cuts(turns: Sequence[ChatMessage]) -> list[int]:
    """Where the prompt may start, oldest first: each leaves out the oldest exchange more,
    and opens with a user turn (templates such as Gemma's refuse a conversation that
    does not alternate user/assistant, so an assistant turn never leads); the last one
    keeps the newest message alone."""
    cuts, start = [0], 0
    while len(turns) - start > 1:
        start += 1
        while len(turns) - start > 1 and turns[start].role != "user":
            start += 1
        cuts.append(start)
    return cuts
