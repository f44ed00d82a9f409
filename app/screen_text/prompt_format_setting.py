"""The per-model prompt-format setting as the GUI shows it: the choices and what was chosen.

ui/ never imports llama_cpp, and llama.cpp is what knows the built-in format
names and which tokens of a vocabulary are special; this app-layer module
asks the engine on the GUI's behalf (a vocabulary-only read, a fraction of a
second, like the inventory the model manager already reads).
"""

from __future__ import annotations

from app.stores.model_library import ModelEntry
from engine.errors import BadInputError
from engine.model.prompt_format import format_choices
from engine.runtime.loaded_model import prompt_format_of_file


def prompt_format_choices() -> tuple[str, ...]:
    """Every value the setting may take: auto, template, completion, llama.cpp's built-ins."""
    return format_choices()


def chosen_format_text(entry: ModelEntry) -> str:
    """ "gemma (no chat template; the vocabulary has ...)": what the model's prompts are
    written in under its setting, or why that setting cannot apply."""
    try:
        return prompt_format_of_file(entry.path, entry.prompt_format).describe()
    except BadInputError as exc:
        return f"cannot apply {entry.prompt_format!r}: {exc}"
