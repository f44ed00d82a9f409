"""A shown prediction carries the spread its kind of machine was measured to have."""

from __future__ import annotations

import pytest

from engine.machine.calibration import expected_error, kind_error, machine_kind
from engine.machine.described_machines import described_names, load_described
from engine.planning.prediction_range import Sureness, sureness


@pytest.mark.parametrize("name", described_names())
def test_a_described_machine_gets_its_calibration_error(name: str) -> None:
    profile = load_described(name)
    spread = sureness(profile)
    assert spread.error == expected_error(profile) == kind_error(machine_kind(profile))
    assert spread.kind == machine_kind(profile)
    low, high = spread.bounds(40.0)
    assert low < 40.0 < high
    # p = f(1 ± e): the published figure f lies between p/(1+e) and p/(1-e)
    assert low * (1 + spread.error) == pytest.approx(40.0)
    assert high * (1 - spread.error) == pytest.approx(40.0)
    assert f"±{spread.error:.0%}" in spread.basis()


def test_once_the_steps_corrected_it_the_figure_is_measured_here() -> None:
    spread = sureness(load_described("desktop-16gb"), corrected_steps=400)
    assert spread.error is None and spread.bounds(24.1) == (24.1, 24.1)
    assert spread.basis() == "measured on this machine"


def test_a_wild_error_still_gives_a_bounded_range() -> None:
    low, high = Sureness(1.5, "SYCL").bounds(10.0)
    assert 0 < low < 10.0 < high < float("inf")
