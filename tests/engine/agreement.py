"""What "the same reply" means when streams share llama_decode steps.

A step that carries several sequences multiplies wider matrices than a step
of one, and llama.cpp's kernels then sum in another order: log-probabilities
drift by hundredths of a nat, and where the two best tokens were nearly tied
greedy decoding may take the other one (and the reply goes its own way from
there). Another sequence's cells leaking into a stream's attention would
move them by far more. So a shared run agrees with the stream alone when
its tokens are the same with close log-probabilities, up to a token the
solo run rated within NEAR_TIE of its best.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from engine.generation.logprobs import TokenLogprob
from engine.generation.sampling import GREEDY
from engine.generation.scheduler import Scheduler
from engine.generation.stream import Stream, StreamRequest

LOGPROB_TOLERANCE = 0.3  # nats: summation order drifts; another sequence's cells would not
NEAR_TIE = 0.5  # nats from the solo run's best token, for a token a shared run may take instead
TOP = 5


def near_ties(alone: TokenLogprob) -> set[int]:
    """The tokens a shared run may take where the solo run took `alone.token`."""
    return {token for token, _text, logprob in alone.top if logprob > alone.logprob - NEAR_TIE}


def assert_agrees_with_solo(shared: list[TokenLogprob], alone: list[TokenLogprob]) -> None:
    """Same tokens with close log-probabilities, up to a near-tie that tipped another way."""
    for mine, theirs in zip(shared, alone, strict=False):
        if mine.token != theirs.token:
            assert mine.token in near_ties(theirs), (mine, theirs)
            return
        assert abs(mine.logprob - theirs.logprob) < LOGPROB_TOLERANCE, (mine, theirs)


def assert_tokens_agree_with_solo(tokens: Sequence[int], alone: list[TokenLogprob]) -> None:
    """Same tokens up to a near-tie that tipped another way (for replies that carry no
    log-probabilities of their own, like a batch job's)."""
    for index, (mine, theirs) in enumerate(zip(tokens, alone, strict=False)):
        if mine != theirs.token:
            assert mine in near_ties(theirs), (index, mine, theirs)
            return


def run_until_done(
    scheduler: Scheduler, streams: list[Stream], before_decode: Callable[[], None] | None = None
) -> None:
    while not all(s.done for s in streams):
        scheduler.step(before_decode)


def solo_logprobs(
    scheduler: Scheduler, tokens: Sequence[int], max_tokens: int, seq_id: int = 1
) -> list[TokenLogprob]:
    """Greedy from `tokens` alone in sequence `seq_id`, from an empty cache: each token's
    log-probability and its TOP rivals'."""
    settings = GREEDY.with_changes(max_tokens=max_tokens)
    request = replace(
        StreamRequest.of_tokens(tokens, settings, reuse_cache=False), top_logprobs=TOP
    )
    stream = scheduler.admit(request, seq_id, seed=0)
    run_until_done(scheduler, [stream])
    return stream.take_logprobs()
