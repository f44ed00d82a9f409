"""The token prefix a batch's prompts have in common: evaluated once, copied into each sequence.

Batch jobs send many prompts that open with the same system prompt and
instruction. On a CPU, prompt evaluation does not get faster with batching,
so not evaluating that shared opening again for every document is where a
batch job gains beyond faster decoding. Prompts arrive one by one (the job
reads its documents lazily), so the prefix is found from the first two
prompts that share enough tokens; every later prompt reuses as much of it as
it shares.
"""

from __future__ import annotations

from collections.abc import Sequence

MIN_SHARED_TOKENS = 8  # below this, copying a KV stream costs about what it saves


def common_prefix_length(first: Sequence[int], second: Sequence[int]) -> int:
    length = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        length += 1
    return length


class SharedPrefix:
    """The shared tokens once evaluated (`tokens`), and the last prompt seen before that."""

    def __init__(self, min_tokens: int = MIN_SHARED_TOKENS) -> None:
        self.tokens: tuple[int, ...] = ()
        self._min_tokens = min_tokens
        self._last_seen: Sequence[int] | None = None

    @property
    def established(self) -> bool:
        return bool(self.tokens)

    def candidate(self, prompts: Sequence[Sequence[int]]) -> tuple[int, ...]:
        """What to evaluate as the shared prefix, given the newly arrived prompts; () if nothing.

        The last token of a prompt is never shared: its logits start the reply,
        so every sequence evaluates at least that one itself.
        """
        seen = [p for p in (self._last_seen, *prompts) if p]
        if prompts:
            self._last_seen = prompts[-1]
        if self.established or len(seen) < 2:
            return ()
        first, second = seen[0], seen[1]
        length = min(common_prefix_length(first, second), len(first) - 1, len(second) - 1)
        return tuple(first[:length]) if length >= self._min_tokens else ()

    def reusable(self, prompt: Sequence[int]) -> int:
        """How many leading tokens of `prompt` can be copied instead of evaluated."""
        if not self.established:
            return 0
        length = min(common_prefix_length(self.tokens, prompt), len(prompt) - 1)
        return length if length >= self._min_tokens else 0
