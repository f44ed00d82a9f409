"""Models suggested after profiling, from the local Hub through the real catalogue and planner.

Candidates are the most downloaded repositories; a model too big for the machine is
passed over before any file of it is read, a gated or broken one is skipped, and
each suggestion carries the planner's speed for this machine and its download size.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from local_hub import LocalHub
from local_hub.repos import TestRepos

from app.hub.catalogue import Catalogue
from app.hub.hub_errors import HubOfflineError
from app.hub.model_suggestions import preferred_quant, suggest_models
from app.hub.remote_plans import READABLE_TOKENS_PER_S, default_budget
from engine.machine.described_machines import load_described
from engine.machine.profile import Profile

GIB = 1 << 30


def small_machine(profile: Profile) -> Profile:
    """The recorded 2-core profile, no GPU, with 4 GiB of RAM: no 30B model fits it."""
    hardware = dict(profile.hardware or {})
    hardware["memory"] = {**(hardware.get("memory") or {}), "total_bytes": 4 * GIB}
    return replace(profile, hardware=hardware)


def test_a_laptop_gets_the_two_most_downloaded_models_that_run_well_on_it(
    local_hub: LocalHub, hub_repos: TestRepos
) -> None:
    laptop = load_described("laptop-8gb")
    found = suggest_models(laptop, default_budget(laptop), catalogue=Catalogue(local_hub.url))
    assert [(s.repo_id, s.model.quant) for s in found] == [
        (hub_repos.qwen3_moe, "Q4_K_M"),  # 85,000 downloads; 30B-A3B fits 16 GB + 8 GB
        (hub_repos.tiny_llama, "Q4_0"),
    ]
    for suggestion in found:
        assert suggestion.prediction.fits_ram
        assert suggestion.prediction.decode_tokens_per_s >= READABLE_TOKENS_PER_S
        assert suggestion.download_bytes == suggestion.model.download_size > 0
    # only the suggested quants' headers were read, and of nothing else
    read = {r.path.rsplit("/", 1)[-1] for r in local_hub.requests if "/cdn/" in r.path}
    assert read == {"Qwen3-30B-A3B-Q4_K_M.gguf", "tiny-llama-Q4_0.gguf"}


def test_a_small_machine_is_offered_small_models_and_never_a_gated_or_broken_one(
    local_hub: LocalHub, hub_repos: TestRepos, recorded_profile
) -> None:
    found = suggest_models(
        small_machine(recorded_profile), 0, limit=5, catalogue=Catalogue(local_hub.url)
    )
    ids = [s.repo_id for s in found]
    assert hub_repos.qwen3_moe not in ids and ids[0] == hub_repos.tiny_llama
    assert hub_repos.gated not in ids and "shardtest/Broken-GGUF" not in ids
    assert not any("Qwen3" in r.path for r in local_hub.requests if "/cdn/" in r.path)


def test_offline_there_are_no_suggestions_but_one_line_at_once(recorded_profile) -> None:
    started = time.monotonic()
    with pytest.raises(HubOfflineError, match="no connection to the Hub"):
        suggest_models(
            small_machine(recorded_profile), 0, catalogue=Catalogue("http://127.0.0.1:9")
        )
    assert time.monotonic() - started < 3


def test_the_preferred_quant_is_a_4_bit_one_when_there_is_one(
    local_hub: LocalHub, hub_repos: TestRepos
) -> None:
    details = Catalogue(local_hub.url).details(hub_repos.tiny_llama)
    chosen = preferred_quant(details.models)
    assert chosen is not None and chosen.quant == "Q4_0"
    assert preferred_quant([m for m in details.models if m.quant == "F16"]) is None
