"""What the next llama_decode carries: which streams, and how many prompt tokens each.

The scheduler keeps what each sequence's cache holds; this decides a step's
contents from the streams that can step and what recent steps cost:

- while the conversation decodes, the others ride along within a budget of
  tokens per step (engine.generation.step_budget), decoding ones first, those
  left out longest first, then prompts a few tokens at a time;
- otherwise every stream steps: a token for each decoding stream and prompt
  chunks for the others, the conversation's first, then the shortest remaining
  prompt first, so it starts decoding early;
- while several prompts wait (a burst of API clients), a step finishes a group of
  the shortest, sized from the steps' fitted cost (engine.generation.prompt_groups),
  each other prompt a token.
"""

from __future__ import annotations

from engine.generation.prompt_groups import StepCostFit, prompts_to_finish
from engine.generation.step_budget import StepBudget
from engine.generation.stream import Stream

Chunks = dict[int, list[int]]  # prompt tokens a step takes, by sequence


class StepComposer:
    """A context's step contents, and what it learns from the steps (their costs, the
    conversation's pace, who was left out)."""

    def __init__(self, n_batch: int) -> None:
        self.n_batch = n_batch  # llama_decode takes at most this many tokens
        self.budget = StepBudget(n_batch - 1)
        self.step_costs = StepCostFit()  # what a step costs here: fixed, and per token
        self._waited: dict[int, int] = {}  # steps a decoding stream was left out of, by seq

    def compose(self, stepping: list[Stream], chat: Stream | None) -> tuple[list[Stream], Chunks]:
        """The streams of the next step, in sequence order, and their prompt chunks; `chat`
        is the conversation's stream, if one runs."""
        if chat is not None and chat.is_decoding and len(stepping) > 1:
            return self._paced(stepping, chat)
        return stepping, self._prompt_chunks(stepping, self._grouped_size(stepping, chat), chat)

    def forget(self, seq_id: int) -> None:
        """A stream ended: its sequence starts afresh."""
        self._waited.pop(seq_id, None)

    def _prompt_chunks(self, stepping: list[Stream], n_tokens: int, chat: Stream | None) -> Chunks:
        """Prompt tokens for a step of at most `n_tokens`: the conversation's first, then the
        shortest remaining prompt first.

        A prompt that finishes early starts decoding early, and its decode tokens
        ride along in the steps that carry the longer prompts. Every prompt gets
        at least one token: in the per-sequence layout llama.cpp runs a gap in the
        sequence ids as a separate micro-batch, which would read the weights again.
        """
        filling = sorted(
            (s for s in stepping if not s.is_decoding),
            key=lambda s: (s is not chat, s.prompt_left),
        )
        budget = n_tokens - (len(stepping) - len(filling)) - len(filling)
        chunks: Chunks = {}
        for stream in filling:
            chunk = stream.prompt_chunk(1 + max(budget, 0))
            chunks[stream.seq_id] = chunk
            budget -= len(chunk) - 1
        return chunks

    def _grouped_size(self, stepping: list[Stream], chat: Stream | None) -> int:
        """The step's size when several prompts wait: one that finishes the shortest of them
        a group at a time (engine.generation.prompt_groups), each other prompt a token.
        The batch's size while one prompt waits, or the conversation's, or before the
        steps have told what they cost."""
        filling = [s for s in stepping if not s.is_decoding]
        if len(filling) < 2 or (chat is not None and chat in filling):
            return self.n_batch
        fixed = self.step_costs.fixed_in_tokens()  # a pass over the recent steps: only here
        if fixed is None:
            return self.n_batch
        left = sorted(s.prompt_left for s in filling)
        decoding = len(stepping) - len(filling)
        group = prompts_to_finish(left, decoding, fixed)
        size = decoding + len(filling) + sum(n - 1 for n in left[:group])
        return min(self.n_batch, size)

    def _paced(self, stepping: list[Stream], chat: Stream) -> tuple[list[Stream], Chunks]:
        """The streams and prompt chunks of a step that carries the conversation's token:
        others only within the step budget, decoding ones first (those left out longest
        first), then prompts a few tokens at a time."""
        others = [s for s in stepping if s is not chat]
        decoding = sorted(
            (s for s in others if s.is_decoding), key=lambda s: -self._waited.get(s.seq_id, 0)
        )
        budget = self.budget.take(len(decoding))
        riding = decoding[:budget]
        filling = [s for s in others if not s.is_decoding][: max(budget - len(riding), 0)]
        for stream in others:
            left_out = stream not in riding and stream not in filling
            self._waited[stream.seq_id] = self._waited.get(stream.seq_id, 0) + 1 if left_out else 0
        chosen = sorted([chat, *riding, *filling], key=lambda s: s.seq_id)
        return chosen, self._prompt_chunks(chosen, 1 + budget, chat)
