"""The cost model against published llama.cpp measurements (engine.machine.calibration).

Every row of the calibration table is predicted on its described machine with the
real CostModel (engine.planning.calibration_check); the per-row table is printed
(`pytest -s` shows it) so its figures can be quoted.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from engine.machine.calibration import (
    MODEL_SHAPES,
    Prediction,
    expected_error,
    measurements,
    model_inventory,
    predictions_csv,
    row_inventory,
    stored_predictions,
)
from engine.machine.datasheets import DESCRIBED_MACHINES
from engine.machine.described_machines import load_described
from engine.machine.profile import Profile
from engine.model.inventory import SubLayerKind
from engine.planning.calibration_check import bounded_errors, predict_all, table
from engine.planning.cost_model import CostModel, Placement, Where

MEDIAN_BOUND, WORST_BOUND = 0.15, 0.35
SIZE_TOLERANCE = 0.03
ROWS = measurements()
ALL_GPU = Placement(Where.GPU)


@pytest.fixture(scope="module")
def predictions() -> list[Prediction]:
    computed = predict_all()
    print("\n" + table(computed), file=sys.stderr)
    return computed


def test_every_row_cites_a_source_and_runs_on_a_described_machine() -> None:
    assert len(ROWS) >= 15 and len({row.id for row in ROWS}) == len(ROWS)
    for row in ROWS:
        assert row.source.startswith("https://github.com/"), row.id
        assert row.machine in DESCRIBED_MACHINES and row.shape in MODEL_SHAPES, row.id
        assert row.published_tps > 0 and row.role in ("calibrates", "checks", "misses")
        assert row.role == "checks" or row.note, f"{row.id}: say what was fitted or why it misses"
    assert {row.backend for row in ROWS} >= {"CUDA", "Vulkan", "CPU"}


@pytest.mark.parametrize("row", [r for r in ROWS if r.file_gib], ids=lambda r: r.id)
def test_the_model_shapes_weigh_what_the_sources_print(row) -> None:
    inventory = row_inventory(row)
    assert inventory.file_bytes / 1024**3 == pytest.approx(row.file_gib, rel=SIZE_TOLERANCE)


def test_predictions_lie_within_the_bounds(predictions: list[Prediction]) -> None:
    missing = {row.id for row in ROWS if row.role == "misses"}
    kept = [p for p in predictions if p.id not in missing]
    assert sorted(abs(p.error) for p in kept) == sorted(bounded_errors(predictions))
    assert statistics.median(abs(p.error) for p in kept) <= MEDIAN_BOUND
    worst = max(kept, key=lambda p: abs(p.error))
    assert abs(worst.error) <= WORST_BOUND, worst


def test_rows_said_to_miss_still_miss(predictions: list[Prediction]) -> None:
    """When the cost model learns what a `misses` row needs, the row counts again."""
    by_id = {p.id: p for p in predictions}
    missing = [row for row in ROWS if row.role == "misses"]
    assert missing, "no row misses: drop this test"
    for row in missing:
        assert abs(by_id[row.id].error) > WORST_BOUND, f"{row.id} no longer misses"


def test_shipped_predictions_are_current(predictions: list[Prediction]) -> None:
    shipped = Path(__file__).resolve().parents[2] / "engine" / "machine" / "calibration"
    text = (shipped / "predictions.csv").read_text(encoding="utf-8")
    assert text == predictions_csv(predictions), "run python -m engine.planning.calibration_check"


def test_expected_error_is_the_80th_percentile_of_the_machine_kind() -> None:
    stored = stored_predictions()

    def errors(kind: str, roles: tuple[str, ...]) -> list[float]:
        return [abs(stored[r.id].error) for r in ROWS if r.role in roles and r.backend == kind]

    def p80(kind: str | None) -> float:
        """Of the kind's checks rows where it has 3, else of all its rows but misses."""
        kinds = [kind] if kind else sorted({r.backend for r in ROWS})
        chosen = []
        for one in kinds:
            checks = errors(one, ("checks",))
            chosen += checks if len(checks) >= 3 else errors(one, ("checks", "calibrates"))
        return statistics.quantiles(chosen, n=100, method="inclusive")[79]

    cuda, vulkan = load_described("rtx4090-desktop"), load_described("rx7900xtx-vulkan")
    assert expected_error(cuda) == pytest.approx(p80("CUDA"))
    assert expected_error(vulkan) == pytest.approx(p80("Vulkan"))
    assert expected_error(load_described("m1max-metal")) == pytest.approx(p80("Metal"))
    assert p80("CUDA") != p80("Vulkan")
    assert cuda.gpu is not None
    sycl = replace(cuda, gpu=replace(cuda.gpu, backend="SYCL"))  # no SYCL rows: all rows
    assert expected_error(sycl) == pytest.approx(p80(None))
    cpu_only = replace(cuda, gpu=None)
    assert expected_error(cpu_only) == pytest.approx(p80("CPU"))


def test_a_measured_profile_has_no_calibration_error(recorded_profile) -> None:
    assert expected_error(recorded_profile) is None


# --- the fixed costs the roofline misses ---


def decode_tokens_per_s(profile: Profile, shape: str) -> float:
    inventory = model_inventory(shape, "Q4_0")
    step = CostModel(profile).predict_step(inventory, 1, profile.physical_cores, 1, 64, ALL_GPU)
    return 1.0 / step.seconds


def test_routed_experts_cost_the_5090_most_of_its_moe_decode_speed() -> None:
    desktop = load_described("rtx5090-desktop")
    roofline = replace(desktop, expert_overhead_s={})
    with_experts = decode_tokens_per_s(desktop, "qwen3-30b-a3b")
    assert with_experts < 0.6 * decode_tokens_per_s(roofline, "qwen3-30b-a3b")
    assert decode_tokens_per_s(desktop, "llama-3-8b") == decode_tokens_per_s(roofline, "llama-3-8b")


def test_experts_on_the_cpu_pay_the_cpu_figure() -> None:
    desktop = load_described("desktop-16gb")
    inventory = model_inventory("qwen3-30b-a3b", "Q4_0")
    experts_on_cpu = Placement(
        Where.GPU, {(b.index, SubLayerKind.ROUTED_EXPERTS): Where.CPU for b in inventory.blocks}
    )

    def seconds(profile: Profile) -> float:
        model = CostModel(profile)
        return model.predict_step(inventory, 1, 16, 1, 64, experts_on_cpu).seconds

    per_expert = desktop.expert_overhead_s["cpu"]
    expected = per_expert * inventory.expert_used_count * len(inventory.blocks)
    slower = seconds(desktop) - seconds(replace(desktop, expert_overhead_s={"gpu": 1.0}))
    assert slower == pytest.approx(expected, rel=1e-9)
