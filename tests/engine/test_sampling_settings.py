"""Sampling settings: the defaults people expect, refusals in one line, saved and read back."""

from __future__ import annotations

import pytest

from engine.generation.sampling import GREEDY, SUMMARY_SAMPLING, SamplingSettings


def test_defaults_are_ollamas_and_lm_studios() -> None:
    s = SamplingSettings()
    assert (s.temperature, s.top_k, s.top_p, s.min_p) == (0.7, 40, 0.95, 0.05)
    assert (s.repeat_penalty, s.repeat_last_n) == (1.1, 64)
    assert not s.uses_dry and s.stop_loops


def test_greedy_is_pure_argmax_and_summaries_are_steered_off_repeats() -> None:
    assert GREEDY.is_greedy and GREEDY.repeat_penalty == 1.0 and not GREEDY.uses_dry
    assert SUMMARY_SAMPLING.is_greedy and SUMMARY_SAMPLING.uses_dry
    assert SUMMARY_SAMPLING.repeat_penalty > 1.0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("temperature", -1.0, "temperature"),
        ("top_p", 0.0, "top_p"),
        ("min_p", 2.0, "min_p"),
        ("repeat_penalty", 0.0, "repeat_penalty"),
        ("repeat_last_n", -2, "repeat_last_n"),
        ("presence_penalty", float("nan"), "presence_penalty"),
        ("dry_multiplier", -0.5, "dry_multiplier"),
        ("dry_base", 0.5, "dry_base"),
        ("seed", -3, "seed"),
        ("max_tokens", 0, "max_tokens"),
    ],
)
def test_a_bad_value_is_refused_with_its_name(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplingSettings(**{field: value})  # type: ignore[arg-type]


def test_settings_survive_json_and_older_records() -> None:
    s = SamplingSettings(dry_multiplier=0.8, seed=5, stop=("END", ""), max_tokens=99)
    assert s.stop == ("END",)
    assert SamplingSettings.from_dict(s.to_dict()) == s
    old = {"temperature": 0.2, "top_p": 0.9, "max_tokens": 64, "n_ctx": 4096, "stop": None}
    assert SamplingSettings.from_dict(old) == SamplingSettings(
        temperature=0.2, top_p=0.9, max_tokens=64
    )
