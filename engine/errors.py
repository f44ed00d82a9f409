"""Errors the engine raises on purpose.

The CLI maps `BadInputError` to exit code 2 and a one-line message, the worker
turns any of them into an error event; everything else is a bug (exit 1).
"""


class ShardChatError(Exception):
    """Base of the errors we raise deliberately; the message is for the user."""


class BadInputError(ShardChatError):
    """The user gave us something we cannot use: a path, a file, an argument."""


class ModelFileError(BadInputError):
    """A model path that is missing, unreadable or not a valid GGUF file."""


class ContextOverflowError(BadInputError):
    """A single message that cannot fit the context window even on its own."""


class PromptTooLong(BadInputError):
    """A prompt that leaves no room for a reply in the window it would run in: the scheduler
    refuses it at admission. The API server and batch runs check the same rule first
    (engine.generation.prompt_pieces.prompt_fits), each in its own words."""

    def __init__(self, size: int, room: int) -> None:
        super().__init__(f"the prompt takes {size} tokens; the context holds {room}")


class GenerationCancelled(ShardChatError):
    """Raised inside the engine when a cancel request stops a decode."""
