"""One llama_decode call as the scheduler saw it: plain values for logs, statistics and plans."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DecodeStep:
    """Its size, how many sequences it carried, its plan tier and how long it took."""

    n_tokens: int
    n_sequences: int
    tier: int | None  # plan.tier_for(n_tokens) when the scheduler has a plan
    seconds: float
    n_prompt_tokens: int = 0  # of n_tokens, how many were prompt (prefill) tokens
    aborted: bool = False  # a cancel stopped llama.cpp inside this step
    n_past: int = 0  # the position of the step's first token (its attention's reach)
    n_outputs: int = 1  # tokens whose logits came back
    image: bool = False  # image embeddings, not tokens
    # the sequences it carried: 0 the conversation, the others API clients and a job's
    # documents, so a log shows which activities shared the step
    sequences: tuple[int, ...] = ()
