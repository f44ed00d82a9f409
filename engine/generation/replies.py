"""A reply as its consumer sees it: streamed text pieces, then how it ended and what it cost.

The scheduler advances streams step by step; `generate` admits one stream and
drives the scheduler until that stream ends, yielding its text as it comes.
Other streams of the same scheduler advance in the same steps. A consumer
that stops iterating (the window closed, the user moved on) ends its stream.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from engine.errors import BadInputError
from engine.generation.scheduler import Scheduler
from engine.generation.stats import FinishReason, GenerationResponse
from engine.generation.stream import StreamRequest

log = logging.getLogger(__name__)


def generate(
    scheduler: Scheduler, request: StreamRequest, seed: int, seq_id: int = 0
) -> Iterator[GenerationResponse]:
    """Stream the reply to `request` in sequence `seq_id`; BadInputError if llama.cpp failed."""
    stream = scheduler.admit(request, seq_id, seed)
    log.info("prompt: %d tokens, %d reused from the cache", len(stream.identities), stream.reused)
    try:
        while not stream.done:
            scheduler.step()
            text = stream.take_text()
            if text and not stream.done:
                yield GenerationResponse(text, len(stream.generated))
        if stream.finish is FinishReason.ERROR:
            raise BadInputError(stream.error or "llama.cpp failed while generating")
        yield GenerationResponse(
            text, len(stream.generated), stream.finish, stream.stats(), stream.kept_text
        )
    finally:
        if not stream.done:
            scheduler.retire(stream)
