"""The cost model against the calibration table: every published row predicted.

Each row of engine.machine.calibration's table ran a model on a named machine;
here the same model shape (a shape-only header, engine.machine.calibration) is
costed on that machine's described profile with the real CostModel, placed as
the row's settings place it, and the predicted tokens/s set against the
published one. `python -m engine.planning.calibration_check` prints the table
and rewrites engine/machine/calibration/predictions.csv, which
engine.machine.calibration.expected_error reads; tests/engine/test_calibration.py
checks that file is current and the errors within bounds.
"""

from __future__ import annotations

import logging
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from engine.machine.calibration import (
    MISSES,
    PREDICTIONS_FILE,
    Figure,
    Measurement,
    Prediction,
    measurements,
    predictions_csv,
    row_inventory,
)
from engine.machine.described_machines import load_described
from engine.model.inventory import ModelInventory, SubLayer, SubLayerKind
from engine.planning.cost_model import ALL_CPU, CostModel, Placement, Where

logger = logging.getLogger(__name__)

PROMPT_TOKENS = 512
DECODE_PAST = 64  # tg128: the cache holds 1..128 tokens, 64 on average
SERVER_PAST = 256
CUBLAS_F16 = "cublas-f16"  # a server's one request: a short chat prompt before the reply, assumed


def placement_of(row: Measurement, inventory: ModelInventory) -> Placement:
    """Where llama.cpp put each sub-layer under the row's settings.

    -ngl 99 puts every block on the GPU and leaves the token embedding in host
    memory; --n-cpu-moe N then keeps the routed experts of the first N blocks on
    the CPU, where a few-token step computes them.
    """
    if row.placement == "cpu":
        return ALL_CPU
    on_cpu: dict[tuple[int | None, SubLayerKind], Where] = {
        (None, SubLayerKind.TOKEN_EMBEDDING): Where.CPU
    }
    for block in inventory.blocks[: row.cpu_moe_blocks]:
        on_cpu[(block.index, SubLayerKind.ROUTED_EXPERTS)] = Where.CPU
    return Placement(Where.GPU, on_cpu)


def as_cublas_f16(inventory: ModelInventory) -> ModelInventory:
    """The inventory as GGML_CUDA_FORCE_CUBLAS runs it: the same bytes, every quantized
    matrix dequantized to F16 and multiplied at cuBLAS's F16 rate."""

    def f16(sub: SubLayer) -> SubLayer:
        return replace(sub, quant_types=tuple("F16" if q != "F32" else q for q in sub.quant_types))

    blocks = tuple(
        replace(b, sublayers=tuple(f16(s) for s in b.sublayers)) for b in inventory.blocks
    )
    return replace(inventory, blocks=blocks, globals=tuple(f16(s) for s in inventory.globals))


def predicted_tokens_per_s(row: Measurement) -> float:
    """The row's figure as the cost model predicts it on the row's described machine."""
    inventory = row_inventory(row)
    if row.matmul == CUBLAS_F16 and row.test is Figure.PROMPT_512:
        inventory = as_cublas_f16(inventory)  # one-token steps take MMVQ whatever it says
    model = CostModel(load_described(row.machine))
    placement = placement_of(row, inventory)
    if row.test is Figure.PROMPT_512:
        step = model.predict_step(inventory, PROMPT_TOKENS, row.threads, 1, 0, placement)
        return PROMPT_TOKENS / step.seconds
    past = DECODE_PAST if row.test is Figure.DECODE_128 else SERVER_PAST
    return 1.0 / model.predict_step(inventory, 1, row.threads, 1, past, placement).seconds


def predict(row: Measurement) -> Prediction:
    predicted = predicted_tokens_per_s(row)
    return Prediction(row.id, predicted, (predicted - row.published_tps) / row.published_tps)


def predict_all() -> list[Prediction]:
    return [predict(row) for row in measurements()]


def table(predictions: list[Prediction]) -> str:
    """Predicted against published, row by row, then the median and worst absolute error."""
    by_id = {p.id: p for p in predictions}
    lines = [f"{'row':44} {'kind':6} {'role':10} {'published':>10} {'predicted':>10} {'error':>7}"]
    for row in measurements():
        p = by_id[row.id]
        lines.append(
            f"{row.id:44} {row.backend:6} {row.role:10} {row.published_tps:>10.2f} "
            f"{p.predicted_tps:>10.2f} {p.error:>+7.1%}"
        )
    errors = bounded_errors(predictions)
    lines.append(
        f"{len(errors)} rows (misses left out): median |error| {statistics.median(errors):.1%}, "
        f"worst {max(errors):.1%}"
    )
    return "\n".join(lines)


def bounded_errors(predictions: list[Prediction]) -> list[float]:
    """The absolute errors of every row but those known to miss."""
    missing = {row.id for row in measurements() if row.role == MISSES}
    return [abs(p.error) for p in predictions if p.id not in missing]


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    predictions = predict_all()
    print(table(predictions))
    path = Path(__file__).resolve().parents[1] / "machine" / "calibration" / PREDICTIONS_FILE
    path.write_text(predictions_csv(predictions), encoding="utf-8")
    logger.info("wrote %s", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
