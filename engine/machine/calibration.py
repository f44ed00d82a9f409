"""Public llama.cpp measurements the described machines are checked against.

A described machine is a datasheet turned into a profile by stated assumptions
(engine.machine.described_machines); nothing in that says how far its
predictions are from what llama.cpp really does. The calibration table
(`calibration/measurements.csv`) holds figures people published with
llama.cpp — llama-bench's pp512 / tg128 on named GPUs and CPUs, partial MoE
offload on a named CPU and GPU — each with its source, and the machine it ran
on described beside the others. engine.planning.calibration_check predicts
every row with the real cost model and writes what it predicted to
`calibration/predictions.csv`; `expected_error` reads that back, so a display
can say how far a described machine's figures may be off without running the
cost model.

Rows marked `calibrates` are the ones a figure of engine.machine.datasheets was
fitted to (their `note` says which); `checks` rows set no figure; a `misses`
row is one the cost model is known to get wrong, its `note` says why: it is
printed with the others and kept out of the error bounds and expected_error.

This module also turns a row's model into an inventory: the table names a
model shape (Llama 2 7B, Llama 3 8B, Qwen3 32B, Qwen3 30B-A3B) and a llama.cpp
quant, and a shape-only GGUF header of that model, with llama-quantize's mix of
tensor types, gives the same sub-layers and bytes the real file has.
"""

from __future__ import annotations

import csv
import io
import statistics
from dataclasses import dataclass
from enum import Enum
from functools import cache
from importlib.resources import files

from engine.machine.profile import Profile
from engine.model.gguf_header import parse_header
from engine.model.inventory import ModelInventory, inventory_from_headers
from engine.model.synthetic import shape_only_header
from engine.model.synthetic_spec import SyntheticSpec
from engine.model.synthetic_specs import LLAMA_2_7B, LLAMA_3_8B, QWEN3_30B_A3B, QWEN3_32B

MEASUREMENTS_FILE = "measurements.csv"
PREDICTIONS_FILE = "predictions.csv"
PREDICTION_COLUMNS = ("id", "predicted_tps", "error")
ERROR_PERCENTILE = 80  # expected_error: the share of rows of a kind at most this far off
CPU_KIND = "CPU"
MISSES = "misses"  # a row's role when the cost model is known to get it wrong
CHECKS = "checks"  # a row's role when no figure was fitted to it
MIN_CHECKS = 3  # expected_error: fewer checks rows of a kind, and its fitted rows count too

# The model shapes rows name, as their config.json files give them (engine.model.synthetic_specs).
MODEL_SHAPES: dict[str, SyntheticSpec] = {
    "llama-2-7b": LLAMA_2_7B,
    "llama-3-8b": LLAMA_3_8B,
    "qwen3-32b": QWEN3_32B,
    "qwen3-30b-a3b": QWEN3_30B_A3B,
}


class Figure(str, Enum):
    """What a row's figure measures."""

    PROMPT_512 = "pp512"  # llama-bench: one 512-token llama_decode from an empty cache
    DECODE_128 = "tg128"  # llama-bench: 128 one-token steps after a 1-token warm-up
    DECODE = "decode"  # a server's generation speed for one request


@dataclass(frozen=True)
class Measurement:
    """One published llama.cpp figure and what it was measured on."""

    id: str
    source: str  # where it was published
    published: str  # year-month
    hardware: str  # as the source names it
    machine: str  # the described machine it is predicted on (engine.machine.datasheets)
    backend: str  # "CUDA", "Vulkan", "Metal" or "CPU": which calibration kind it counts for
    model: str
    shape: str  # a key of MODEL_SHAPES
    quant: str  # llama.cpp's file type: "Q4_0", "Q4_K_M", ...
    file_gib: float | None  # the model file's size as the source prints it, where it does
    settings: str
    matmul: str  # "native" (llama.cpp's own kernels) or "cublas-f16" (dequantized, cuBLAS F16)
    test: Figure
    threads: int
    placement: str  # "gpu" (-ngl 99), "cpu" (no GPU) or "n-cpu-moe=N"
    published_tps: float
    role: str  # "calibrates" (a datasheet figure was fitted to it), "checks" or "misses"
    note: str  # what was fitted to it, or why it misses

    @property
    def cpu_moe_blocks(self) -> int:
        """--n-cpu-moe's N: the first N blocks keep their experts on the CPU (0: none)."""
        name, _, value = self.placement.partition("=")
        return int(value) if name == "n-cpu-moe" else 0


def measurements() -> tuple[Measurement, ...]:
    """Every row of the calibration table, in its order."""
    return _measurements()


@cache
def _measurements() -> tuple[Measurement, ...]:
    rows = csv.DictReader(io.StringIO(_read(MEASUREMENTS_FILE)))
    return tuple(_measurement(row) for row in rows)


def _measurement(row: dict[str, str]) -> Measurement:
    return Measurement(
        **{key: row[key] for key in ("id", "source", "published", "hardware", "machine")},
        **{key: row[key] for key in ("backend", "model", "shape", "quant", "settings")},
        matmul=row["matmul"],
        file_gib=float(row["file_gib"]) if row["file_gib"] else None,
        test=Figure(row["test"]),
        threads=int(row["threads"]),
        placement=row["placement"],
        published_tps=float(row["published_tps"]),
        role=row["role"],
        note=row["note"],
    )


def _read(name: str) -> str:
    return (files("engine.machine") / "calibration" / name).read_text(encoding="utf-8")


# ------------------------------------------------------------------ model inventories


def row_inventory(row: Measurement) -> ModelInventory:
    """The sub-layers and bytes of the row's model, from a shape-only header (no file)."""
    return model_inventory(row.shape, row.quant)


@cache
def model_inventory(shape: str, quant: str) -> ModelInventory:
    """`shape` (a MODEL_SHAPES key) quantized to `quant` as llama-quantize mixes it."""
    spec = MODEL_SHAPES[shape]
    base, tensor_types = quant_mix(quant, spec.n_layer)
    header, file_bytes = shape_only_header(spec, base, tensor_types, file_type=quant)
    name = f"calibration://{shape}-{quant}.gguf"
    return inventory_from_headers([parse_header(header, file_bytes)], name, file_bytes)


def quant_mix(quant: str, n_layer: int) -> tuple[str, list[tuple[str, str]]]:
    """(base type, (tensor regex, type) pairs) roughly as llama-quantize makes `quant`: the
    output head in Q6_K (Q8_0 and F16 keep their own), Q4_K_M's attn_v and ffn_down in Q6_K in its
    "more bits" layers."""
    if quant in ("Q8_0", "F16"):
        return quant, []
    head = (r"output\.weight", "Q6_K")
    if quant == "Q4_K_M":
        more_bits = "|".join(str(i) for i in range(n_layer) if _more_bits(i, n_layer))
        wider = rf"blk\.({more_bits})\.(attn_v|ffn_down|ffn_down_exps)\.weight"
        return "Q4_K", [head, (wider, "Q6_K")]
    return quant, [head]


def _more_bits(layer: int, n_layer: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers and every third."""
    return layer < n_layer // 8 or layer >= 7 * n_layer // 8 or (layer - n_layer // 8) % 3 == 2


# ---------------------------------------------------------------------- predictions


@dataclass(frozen=True)
class Prediction:
    """What the cost model predicted for one row (engine.planning.calibration_check)."""

    id: str
    predicted_tps: float
    error: float  # (predicted - published) / published

    def to_csv_row(self) -> list[str]:
        return [self.id, f"{self.predicted_tps:.2f}", f"{self.error:.4f}"]


def predictions_csv(predictions: list[Prediction]) -> str:
    """The predictions file's text: a header line, then one line per row."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(PREDICTION_COLUMNS)
    writer.writerows(p.to_csv_row() for p in predictions)
    return out.getvalue()


def stored_predictions() -> dict[str, Prediction]:
    """The shipped predictions, by row id."""
    rows = csv.DictReader(io.StringIO(_read(PREDICTIONS_FILE)))
    return {
        r["id"]: Prediction(r["id"], float(r["predicted_tps"]), float(r["error"])) for r in rows
    }


def machine_kind(profile: Profile) -> str:
    """The calibration kind a profile's predictions fall under: its GPU's backend, else CPU."""
    return profile.gpu.backend if profile.gpu is not None else CPU_KIND


def expected_error(profile: Profile) -> float | None:
    """How far (as a share, 0.15 = 15 %) a described profile's predictions may be off.

    The 80th percentile of the absolute errors of the calibration rows of the same
    kind (CUDA, Vulkan, Metal, CPU): its `checks` rows where it has at least
    MIN_CHECKS, else all its rows (fitted ones too) but those known to miss; a kind
    without rows (SYCL) gets the figure of all rows, with nothing better known.

    A profile measured on this machine returns None: the table checks datasheet
    descriptions, while a measured profile's kernels are this machine's own; how
    its predictions track real steps is what the step log (engine.runtime.step_log)
    measures, and what it corrects (engine.planning.step_correction), not this table.
    """
    if not profile.is_described:
        return None
    return kind_error(machine_kind(profile))


@cache  # the shipped table does not change while the app runs; the VRAM panel asks each second
def kind_error(kind: str) -> float:
    """The 80th percentile of |error| of the calibration rows of a kind (see expected_error).

    Also what a measured profile's figures are quoted with before the model's own steps
    corrected them: its kernels are this machine's, but what the roofline leaves out
    (launches, per-expert costs) it leaves out on any machine of the kind."""
    errors = _errors_by_kind()
    everything = [error for kind_errors in errors.values() for error in kind_errors]
    return _percentile(errors.get(kind) or everything, ERROR_PERCENTILE)


def _errors_by_kind() -> dict[str, list[float]]:
    """Absolute errors by kind: of the `checks` rows where a kind has MIN_CHECKS of them
    (a fitted row's error says little), else of all its rows but those that miss."""
    stored = stored_predictions()
    checks: dict[str, list[float]] = {}
    counted: dict[str, list[float]] = {}
    for row in measurements():
        if row.id not in stored or row.role == MISSES:
            continue
        error = abs(stored[row.id].error)
        counted.setdefault(row.backend, []).append(error)
        if row.role == CHECKS:
            checks.setdefault(row.backend, []).append(error)
    return {
        kind: checks[kind] if len(checks.get(kind, ())) >= MIN_CHECKS else errors
        for kind, errors in counted.items()
    }


def _percentile(values: list[float], percent: int) -> float:
    """Linear interpolation between closest ranks, like statistics.quantiles' inclusive."""
    if len(values) == 1:
        return values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[percent - 1]
