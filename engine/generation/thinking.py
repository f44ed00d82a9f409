"""Telling a reasoning model's thinking apart from its answer, as the text streams.

Reasoning models (Qwen3, DeepSeek-R1 distills and others) write their thinking
between `<think>` and `</think>` before the answer. The reader should see the
answer, with the thinking apart, and later turns should not be fed the thinking
as if it had been said. Text arrives in pieces cut at token boundaries, so a
tag may be split (`<thi` + `nk>`): the splitter holds back a piece's tail while
it could still be the start of a tag, and lets it go once it cannot.

Templates such as DeepSeek-R1's and Qwen3's open the thinking in the generation
prompt (it ends with `<think>\\n`), so the reply starts inside the thinking;
`ThinkingSplitter.after(prompt_text)` decides that from the prompt's tail.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from engine.generation.text_assembly import partial_at_end

# opening tag -> closing tag; the tags reasoning models are trained to write
THINK_TAGS: dict[str, str] = {"<think>": "</think>", "<thinking>": "</thinking>"}


@dataclass(frozen=True)
class SplitText:
    """What one piece of reply text adds to the thinking and to the answer."""

    thinking: str = ""
    answer: str = ""

    def __bool__(self) -> bool:
        return bool(self.thinking or self.answer)


class _Where(Enum):
    START = "start"  # nothing but whitespace yet: an opening tag may still come
    THINKING = "thinking"
    ANSWER = "answer"


class ThinkingSplitter:
    """Splits streamed reply text into thinking and answer pieces, one `feed` per piece.

    Only a reply that opens with a thinking tag (or whose prompt opened one) has
    thinking: a tag in the middle of an answer is the answer's own text. The
    whitespace between the tags and their text is left out of both parts. Call
    `finish` after the last piece: text held back as a possible tag goes where it
    was, so a reply cut short inside its thinking stays thinking.
    """

    def __init__(self, close_tag: str | None = None) -> None:
        """`close_tag`: the reply starts inside thinking that this tag ends."""
        self._where = _Where.THINKING if close_tag else _Where.START
        self._close_tag = close_tag or ""
        self._held = ""  # text that may be the start of a tag, or whitespace to trim
        self._trimming = True  # dropping whitespace at the start of the current part

    @classmethod
    def after(cls, prompt_text: str) -> ThinkingSplitter:
        """A splitter for the reply to this rendered prompt: inside thinking when the
        prompt ends with an opening tag (the template's generation prompt opened it)."""
        tail = prompt_text.rstrip()
        for open_tag, close_tag in THINK_TAGS.items():
            if tail.endswith(open_tag):
                return cls(close_tag)
        return cls()

    @property
    def thinking(self) -> bool:
        """Whether the text fed so far ends inside the thinking."""
        return self._where is _Where.THINKING

    def feed(self, text: str) -> SplitText:
        """The thinking and answer text this piece completes (some may be held back)."""
        self._held += text
        thinking, answer = [], []
        while self._held:
            if self._where is _Where.START:
                if not self._start():
                    break
            elif self._where is _Where.THINKING:
                thinking.append(self._think())
                if self._where is _Where.THINKING:
                    break
            else:
                answer.append(self._trimmed(self._held))
                self._held = ""
        return SplitText("".join(thinking), "".join(answer))

    def finish(self) -> SplitText:
        """What was held back, now that no more text comes."""
        held, self._held = self._held, ""
        if self._where is _Where.THINKING:
            return SplitText(thinking=self._trimmed(held.rstrip()))
        return SplitText(answer=held.lstrip() if self._trimming else held)

    def _start(self) -> bool:
        """Decide, from the reply's first non-space text, whether it opens with thinking;
        False while the held text may still become an opening tag."""
        text = self._held.lstrip()
        for open_tag, close_tag in THINK_TAGS.items():
            if text.startswith(open_tag):
                self._where, self._close_tag = _Where.THINKING, close_tag
                self._held, self._trimming = text[len(open_tag) :], True
                return True
        if not text or any(tag.startswith(text) for tag in THINK_TAGS):
            return False
        self._where, self._trimming = _Where.ANSWER, False
        return True

    def _think(self) -> str:
        """The thinking up to the closing tag, or up to a tail that may begin one."""
        text = self._held
        end = text.find(self._close_tag)
        if end >= 0:
            thought = self._trimmed(text[:end].rstrip())
            self._where, self._trimming = _Where.ANSWER, True
            self._held = text[end + len(self._close_tag) :]
            return thought
        # held: a tail that may open the closing tag, and the whitespace before it
        # (whitespace right before the tag is left out)
        body = text[: len(text) - partial_at_end(text, self._close_tag)]
        shown = body.rstrip()
        self._held = text[len(shown) :]
        return self._trimmed(shown)

    def _trimmed(self, text: str) -> str:
        """`text` without the whitespace that opens a part (thinking or answer)."""
        if not self._trimming:
            return text
        text = text.lstrip()
        self._trimming = not text
        return text


def split_whole(text: str, prompt_text: str = "") -> SplitText:
    """Split a whole reply at once (a reply read back from a store, a batch result)."""
    splitter = ThinkingSplitter.after(prompt_text)
    first, rest = splitter.feed(text), splitter.finish()
    return SplitText(first.thinking + rest.thinking, first.answer + rest.answer)
