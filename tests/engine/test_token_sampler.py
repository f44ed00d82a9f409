"""llama.cpp's sampler chain per sequence, on the default model's real logits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from engine.generation.sampling import GREEDY, SamplingSettings
from engine.generation.token_sampler import TokenSampler
from engine.llama.handle import LlamaHandle

pytestmark = pytest.mark.usefixtures("ggml_started")  # it builds Llama() itself

PROMPT = b"The capital of France is"
LAST = -1  # the prompt's last token: the only one with logits


@pytest.fixture(scope="module")
def evaluated(default_model_file: Path) -> Iterator[tuple[llama_cpp.Llama, np.ndarray]]:
    """A context that has just evaluated the prompt, and the logits it left."""
    llm = llama_cpp.Llama(str(default_model_file), n_ctx=256, n_threads=2, verbose=False)
    llm.eval(llm.tokenize(PROMPT))
    logits = np.ctypeslib.as_array(
        llama_cpp.llama_get_logits_ith(LlamaHandle.of(llm).context, LAST), shape=(llm.n_vocab(),)
    ).copy()
    yield llm, logits
    llm.close()


def draws(llm: llama_cpp.Llama, settings: SamplingSettings, n: int, seed: int = 1) -> list[int]:
    """n tokens drawn from the same logits by one sampler (its history grows with each)."""
    with TokenSampler(settings, LlamaHandle.of(llm), seed, llm.n_ctx()) as sampler:
        return [sampler.sample(LlamaHandle.of(llm).context, LAST) for _ in range(n)]


def test_greedy_takes_the_best_token(evaluated) -> None:
    llm, logits = evaluated
    assert draws(llm, GREEDY, 3) == [int(np.argmax(logits))] * 3


def test_a_repeat_penalty_moves_greedy_off_the_token_it_just_gave(evaluated) -> None:
    llm, logits = evaluated
    first, second = draws(llm, GREEDY.with_changes(repeat_penalty=100.0), 2)
    assert first == int(np.argmax(logits)) and second != first


def test_draws_stay_within_top_k(evaluated) -> None:
    llm, logits = evaluated
    settings = SamplingSettings(temperature=50.0, top_k=2, top_p=1.0, min_p=0.0)
    assert set(draws(llm, settings, 200)) == set(np.argsort(logits)[-2:].tolist())


def test_draws_follow_the_temperature_scaled_distribution(evaluated) -> None:
    llm, logits = evaluated
    # at temperature 1 the best token has p = 0.77 here: far from both 0 and 1
    settings = SamplingSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0)
    scaled = logits.astype(np.float64)
    probabilities = np.exp(scaled - scaled.max())
    probabilities /= probabilities.sum()
    best = int(np.argmax(logits))
    assert 0.2 < probabilities[best] < 0.9
    seen = np.mean(np.asarray(draws(llm, settings, 1000)) == best)
    assert seen == pytest.approx(probabilities[best], abs=0.05)


def test_a_seed_makes_draws_reproducible(evaluated) -> None:
    llm, _logits = evaluated
    settings = SamplingSettings(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0)
    assert draws(llm, settings, 20, seed=7) == draws(llm, settings, 20, seed=7)
    assert draws(llm, settings, 20, seed=7) != draws(llm, settings, 20, seed=8)


def test_a_closed_sampler_refuses_to_sample(evaluated) -> None:
    llm, _logits = evaluated
    sampler = TokenSampler(GREEDY, LlamaHandle.of(llm), 0, llm.n_ctx())
    sampler.close()
    with pytest.raises(RuntimeError, match="closed"):
        sampler.sample(LlamaHandle.of(llm).context, LAST)


def test_presence_and_frequency_penalties_move_greedy_off_a_token_it_gave(evaluated) -> None:
    llm, logits = evaluated
    best = int(np.argmax(logits))
    for penalty in ({"presence_penalty": 50.0}, {"frequency_penalty": 50.0}):
        first, second = draws(llm, GREEDY.with_changes(**penalty), 2)
        assert first == best and second != best, penalty


def test_dry_moves_greedy_off_a_sequence_it_keeps_extending(evaluated) -> None:
    """Without DRY greedy gives the best token for ever; with it, the run of that token is a
    repeated sequence that DRY stops once it grows past the allowed length."""
    llm, logits = evaluated
    best = int(np.argmax(logits))
    assert draws(llm, GREEDY, 8) == [best] * 8
    dry = draws(llm, GREEDY.with_changes(dry_multiplier=50.0, dry_allowed_length=2), 8)
    assert dry[:3] == [best] * 3 and dry != [best] * 8


def test_the_settings_seed_wins_over_the_models(evaluated) -> None:
    llm, _logits = evaluated
    settings = SamplingSettings(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=11)
    assert draws(llm, settings, 20, seed=1) == draws(llm, settings, 20, seed=2)
