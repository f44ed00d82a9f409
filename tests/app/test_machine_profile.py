"""This machine's profile, found one way everywhere: its fingerprint and llama.cpp build."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.machine_profile import this_machine_profile
from app.stores.profile_store import ProfileStore
from engine.machine.hardware import probe_hardware
from engine.machine.hardware_info import HardwareInfo
from engine.machine.profile import Profile

RECORDED = Path(__file__).resolve().parents[1] / "data" / "profile-epyc-2core-fast.json"


@pytest.fixture(scope="module")
def here() -> HardwareInfo:
    return probe_hardware()


@pytest.fixture
def measured_here(here: HardwareInfo) -> Profile:
    """The recorded profile, as though measured on this machine under this build."""
    recorded = Profile.from_dict(json.loads(RECORDED.read_text()))
    return replace(
        recorded, fingerprint=here.fingerprint(), llama_build=here.llama_build,
        created_at="2026-01-01T00:00:00+00:00",
    )  # fmt: skip


def test_only_this_machine_under_this_build_counts_unless_any_build_is_asked(
    tmp_path: Path, here: HardwareInfo, measured_here: Profile
) -> None:
    newer = "2026-02-01T00:00:00+00:00"
    other_build = replace(measured_here, llama_build="b1-other", created_at=newer)
    elsewhere = replace(measured_here, fingerprint="cpu=elsewhere", created_at=newer)
    with ProfileStore(tmp_path / "profiles.sqlite3") as store:
        assert this_machine_profile(here, store) is None  # never profiled here
        for profile in (measured_here, other_build, elsewhere):
            store.save(profile)
        assert this_machine_profile(here, store) == measured_here  # not the newer ones
        assert this_machine_profile(here, store, any_build=True) == other_build


def test_without_a_store_the_users_own_is_asked(here: HardwareInfo, measured_here: Profile) -> None:
    assert this_machine_profile(here) is None  # SHARDCHAT_HOME is this test's own (conftest)
    with ProfileStore() as store:
        store.save(measured_here)
    assert this_machine_profile(here) == measured_here
