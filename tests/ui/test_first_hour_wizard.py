"""The first-launch wizard in a person's first hour: how long profiling takes is said from
this machine (its last run, then the steps measured), not promised as a constant; after
profiling it suggests models from the Hub that fit the measured budget."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from app.profile_summary import time_left_text
from app.stores.profile_store import ProfileStore
from engine.machine.hardware import probe_hardware
from engine.machine.profile import Profile
from ui.profile_wizard import ProfileWizard

RECORDED = Path(__file__).resolve().parents[1] / "data" / "profile-epyc-2core-fast.json"


@pytest.fixture(scope="module")
def hardware():
    return probe_hardware()


def recorded_here(hardware, duration_s: float) -> Profile:
    """The recorded 2-core profile as if measured on this machine, taking `duration_s`."""
    profile = Profile.from_json(RECORDED.read_text())
    return replace(profile, fingerprint=hardware.fingerprint(), duration_s=duration_s)


def welcome_text(qtbot, hardware) -> str:
    wizard = ProfileWizard(hardware)
    qtbot.addWidget(wizard)
    return wizard.welcome_page.text.text()


def test_the_welcome_page_says_how_long_profiling_took_here_not_a_constant(qtbot, hardware) -> None:
    first = welcome_text(qtbot, hardware)
    assert "about a minute" not in first
    assert "from one to a few minutes" in first and "as the steps are measured" in first
    with ProfileStore() as store:
        store.save(recorded_here(hardware, 202.4))  # the busy machine of the report
    again = welcome_text(qtbot, hardware)
    assert "the last profile here took 3 min 22 s" in again and "about a minute" not in again


def test_a_step_that_outlasts_the_estimate_does_not_say_a_few_seconds_left() -> None:
    shown = [time_left_text(s) for s in (None, 200, 42, 7, -1, -90)]
    assert shown == [
        "estimating the time left…", "about 3 min left", "about 40 s left",
        "a few seconds left", "taking longer than estimated…", "taking longer than estimated…",
    ]  # fmt: skip
