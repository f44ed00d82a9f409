"""The staging-slot knob reaches llama.cpp only while the planned contexts are created."""

from __future__ import annotations

import os

import pytest

from engine.llama.load_params import LoadParams
from engine.llama.prefetch import ENV, slots_for_contexts


def test_the_slots_are_in_the_environment_only_while_contexts_are_created(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    with slots_for_contexts(3):
        assert os.environ[ENV] == "3"
    assert ENV not in os.environ
    monkeypatch.setenv(ENV, "2")  # a user's own setting comes back afterwards
    with slots_for_contexts(0):
        assert os.environ[ENV] == "0"
    assert os.environ[ENV] == "2"


@pytest.mark.parametrize("slots", [1, -1, 9])
def test_slot_counts_the_patch_would_ignore_are_refused(slots: int) -> None:
    with pytest.raises(ValueError, match="0 \\(serial\\) or 2 to 8"):
        LoadParams("model.gguf", prefetch_slots=slots)
