"""A conversation with the resident model: history in, streamed reply out.

The session keeps the whole history; what the model sees each turn is the
part that fits the context window (see `context_window`). Because the
prompt of turn n+1 starts with the prompt of turn n, llama.cpp reuses the
KV cache of the shared prefix and only the new turn is evaluated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from engine.cancel import CancelToken
from engine.errors import BadInputError
from engine.generation.sampling import SamplingSettings
from engine.generation.scheduler import CONVERSATION
from engine.generation.stats import FinishReason, GenerationResponse, GenerationStats
from engine.generation.stream import Stream, StreamRequest
from engine.generation.thinking import ThinkingSplitter, split_whole
from engine.model.chat_message import ChatMessage
from engine.model.chat_template import RenderedPrompt
from engine.model.image_input import ImageFile
from engine.runtime.context_window import fit_messages
from engine.runtime.loaded_model import LoadedModel, ModelVision

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChatReply:
    """The assistant's whole reply to one user message: the answer, and apart from it
    a reasoning model's thinking."""

    text: str
    stats: GenerationStats
    dropped_messages: int
    thinking: str = ""

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

    @property
    def has_thinking_switch(self) -> bool:
        """Whether the model's template can be told to think or not (`thinking=`)."""
        return self.model.chat_template.has_thinking_switch

    def begin(
        self,
        user_text: str,
        settings: SamplingSettings,
        cancel: CancelToken,
        images: Sequence[ImageFile] = (),
        thinking: bool | None = None,
    ) -> ChatTurn:
        """Start the reply to `user_text` in the conversation's sequence of the model's
        scheduler; whoever steps the scheduler advances it (the engine worker's one loop,
        or `stream_reply`).

        A reasoning model's thinking comes apart from the answer; the history keeps
        it beside the answer, and later prompts show it only to templates that read
        `reasoning_content`. `thinking` turns thinking on or off where the template
        has the switch (None: the template's default); other templates ignore it.

        The user message joins the history only once the prompt fits, and the
        reply (even a cancelled, partial one) joins it when the turn finishes. While
        any message in the prompt has images, the turn goes through the model's
        vision runtime (which re-uses the images' cached embeddings). A model
        without one refuses new images; earlier ones (from another model) it
        leaves out of its prompt, so the conversation goes on in text.
        """
        candidate = [*self.messages, ChatMessage("user", user_text, tuple(images))]
        vision = self._vision_for(images)
        if vision is not None:
            for image in images:
                vision.decoded(image)  # a bad image is refused before it joins the history
        seen = candidate if vision is not None else [replace(m, images=()) for m in candidate]
        fitted = fit_messages(
            seen,
            lambda messages: self._prompt_of(messages, thinking),
            self.model.n_ctx,
            settings.max_tokens,
        )
        rendered, tokens = fitted.prompt
        shown = [image for message in fitted.messages for image in message.images]
        reuse = self._continues_in_cache
        if shown:
            assert vision is not None
            request = vision.request_for(rendered, shown, settings, cancel, reuse)
        else:
            request = StreamRequest.of_tokens(tokens, settings, rendered.stop, cancel, reuse)
        scheduler = self.model.scheduler
        stream = scheduler.admit(request, CONVERSATION, self.model.params.seed)
        log.info(
            "prompt: %d tokens, %d reused from the cache", len(stream.identities), stream.reused
        )
        self.messages = candidate
        self._continues_in_cache = True
        return ChatTurn(self, stream, rendered.text, fitted.dropped_messages)

    def stream_reply(
        self,
        user_text: str,
        settings: SamplingSettings,
        cancel: CancelToken,
        images: Sequence[ImageFile] = (),
        thinking: bool | None = None,
    ) -> Iterator[tuple[GenerationResponse, int]]:
        """`begin` a turn and step the scheduler until it ends (no other activity runs):
        its pieces, then the statistics; each item carries how many old messages were
        left out."""
        turn = self.begin(user_text, settings, cancel, images, thinking)
        try:
            while not turn.stream.done:
                self.model.scheduler.step()
                answer, thought = turn.take()
                if answer or thought:
                    yield GenerationResponse(answer, turn.generated, thinking=thought), turn.dropped
            reply = turn.finish()
            last = GenerationResponse(
                "", turn.generated, reply.finish_reason, reply.stats, turn.kept_answer
            )
            yield last, turn.dropped
        finally:
            turn.abandon()

    def reply(
        self,
        user_text: str,
        settings: SamplingSettings,
        cancel: CancelToken | None = None,
        on_text: Callable[[str], None] | None = None,
        images: Sequence[ImageFile] = (),
        thinking: bool | None = None,
        on_thinking: Callable[[str], None] | None = None,
    ) -> ChatReply:
        """Generate the whole reply, passing each new piece of the answer to `on_text` and
        of the thinking to `on_thinking`."""
        pieces: list[str] = []
        thought: list[str] = []
        dropped = 0
        stats: GenerationStats | None = None
        kept: str | None = None
        stream = self.stream_reply(user_text, settings, cancel or CancelToken(), images, thinking)
        for response, dropped_now in stream:
            dropped = dropped_now
            if response.thinking:
                thought.append(response.thinking)
                if on_thinking is not None:
                    on_thinking(response.thinking)
            if response.text:
                pieces.append(response.text)
                if on_text is not None:
                    on_text(response.text)
            stats = response.stats or stats
            kept = response.kept_text if response.kept_text is not None else kept
        assert stats is not None  # generate always ends with the statistics
        text = "".join(pieces) if kept is None else kept
        return ChatReply(text, stats, dropped, "".join(thought))

    def _vision_for(self, images: Sequence[ImageFile]) -> ModelVision | None:
        """The model's vision runtime; refuses new images when the model has none."""
        vision = self.model.vision
        if vision is None and images:
            name = self.model.inventory.name or "this model"
            raise BadInputError(
                f"{name} cannot see images: it has no vision projector. Pair the projector "
                "(mmproj GGUF) made for it in the model manager, or pass --mmproj"
            )
        return vision

    def _prompt_of(
        self, messages: Sequence[ChatMessage], thinking: bool | None = None
    ) -> tuple[int, tuple[RenderedPrompt, list[int]]]:
        """The rendered prompt and its text tokens, and how many tokens it takes with its
        images (known once encoded, estimated before)."""
        template = self.model.chat_template
        if template.is_fallback or not reads_thinking(template.source or ""):
            messages = [replace(m, thinking="") if m.thinking else m for m in messages]
        switch = thinking if template.has_thinking_switch else None
        rendered = template.render(messages, enable_thinking=switch)
        tokens = self.model.tokenize_prompt(rendered)
        images = [image for message in messages for image in message.images]
        vision = self.model.vision
        image_tokens = sum(vision.tokens_for(image) for image in images) if vision else 0
        return len(tokens) + image_tokens, (rendered, tokens)


def reads_thinking(template_source: str) -> bool:
    """Whether a chat template shows earlier turns' thinking (it reads `reasoning_content`);
    to any other the history is the answers alone."""
    return "reasoning_content" in template_source


class ChatTurn:
    """One reply of the conversation while it streams in sequence 0: its text handed out as
    it comes (answer and thinking apart), the history completed when it finishes."""

    def __init__(self, session: ChatSession, stream: Stream, prompt_text: str, dropped: int):
        self.session = session
        self.stream = stream
        self.dropped = dropped
        self._splitter = ThinkingSplitter.after(prompt_text)
        self._prompt_text = prompt_text
        self._answer: list[str] = []
        self._thought: list[str] = []
        self._flushed = False
        self._finished: ChatReply | None = None

    @property
    def done(self) -> bool:
        return self.stream.done

    @property
    def generated(self) -> int:
        return len(self.stream.generated)

    @property
    def kept_answer(self) -> str | None:
        """A reply that looped, without its repeats (the answer part), or None."""
        kept = self.stream.kept_text
        return split_whole(kept, self._prompt_text).answer if kept is not None else None

    def take(self) -> tuple[str, str]:
        """The answer and thinking said since the last call (all the rest once it ended)."""
        part = self._splitter.feed(self.stream.take_text())
        answer, thought = part.answer, part.thinking
        if self.stream.done and not self._flushed:
            self._flushed = True
            rest = self._splitter.finish()
            answer, thought = answer + rest.answer, thought + rest.thinking
        self._answer.append(answer)
        self._thought.append(thought)
        return answer, thought

    def finish(self) -> ChatReply:
        """The whole reply, once the stream ended; it joins the history (a cancelled, partial
        reply too). BadInputError if llama.cpp failed."""
        if self._finished is not None:
            return self._finished
        stream = self.stream
        if stream.finish is FinishReason.ERROR:
            raise BadInputError(stream.error or "llama.cpp failed while generating")
        self.take()
        kept = self.kept_answer
        said = "".join(self._answer) if kept is None else kept
        thought = "".join(self._thought)
        if said or thought:
            self.session.messages.append(ChatMessage("assistant", said, thinking=thought))
        self._finished = ChatReply(said, stream.stats(), self.dropped, thought)
        return self._finished

    def abandon(self) -> None:
        """End the stream where it is (its consumer went away); no-op once it ended."""
        if not self.stream.done:
            self.session.model.scheduler.retire(self.stream)
