"""What the model is asked: summarise a document, or combine the summaries of its parts.

The instruction comes first and the document last, so every request of a job
starts with the same tokens; the batched engine evaluates that prefix once
and shares it across sequences.
"""

from __future__ import annotations

from engine.model.chat_message import ChatMessage

DEFAULT_MAX_WORDS = 120
SYSTEM = "You summarise documents accurately and concisely, in plain prose."
DEFAULT_INSTRUCTION = "Summarise the following document in at most {max_words} words."


def instruction(prompt: str | None, max_words: int) -> str:
    """The person's prompt (with {max_words} filled in if it has it), or ours."""
    return (prompt or DEFAULT_INSTRUCTION).replace("{max_words}", str(max_words))


def summarise(text: str, name: str, prompt: str | None, max_words: int) -> tuple[ChatMessage, ...]:
    return (
        ChatMessage("system", SYSTEM),
        ChatMessage("user", f"{instruction(prompt, max_words)}\n\nDocument: {name}\n\n{text}"),
    )


def summarise_part(
    text: str, name: str, part: int, parts: int, prompt: str | None, max_words: int
) -> tuple[ChatMessage, ...]:
    return summarise(text, f"{name} (part {part} of {parts})", prompt, max_words)


def combine(
    summaries: list[str], name: str, prompt: str | None, max_words: int
) -> tuple[ChatMessage, ...]:
    """A summary of the parts' summaries (map-reduce), under the same instruction."""
    parts = "\n\n".join(f"Part {i}: {s.strip()}" for i, s in enumerate(summaries, 1))
    text = f"These are summaries of consecutive parts of one document.\n\n{parts}"
    return summarise(text, name, prompt, max_words)
