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


class GenerationCancelled(ShardChatError):
    """Raised inside the engine when a cancel request stops a decode."""
