"""How well the cost model predicts real llama_decode steps on this machine.

For the default model and two synthetic ones (a dense model of about 1 GB and
an MoE model), at 1 and 2 threads, it measures a 256-token prompt step
(tier 256, from an empty cache) and 1- and 16-token decode steps (tiers 1 and
16, after a 256-token context, logits for every new token), and prints the
cost model's prediction next to each with the relative error. The profile is
this machine's stored one (`shardchat profile --fast` makes it), or a JSON
file given with --profile; with neither, a fast profile is measured first.

    .venv/bin/python bench/costmodel_accuracy.py [--profile FILE] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from app.profile_store import ProfileStore
from engine.cost_model import CostModel
from engine.decode_timer import DecodeTimer
from engine.default_model import default_model_path
from engine.hardware import probe_hardware
from engine.inventory import read_inventory
from engine.profile import Profile, ProfileMode
from engine.profiler import Profiler
from engine.synthetic import SyntheticSpec, write_synthetic_model

CONTEXT = 256
TARGET_MEDIAN, TARGET_WORST = 0.15, 0.35
DENSE_1GB = SyntheticSpec(
    "llama", n_layer=16, n_embd=2048, n_head=16, n_head_kv=8, n_ff=5632, context_length=4096
)
MOE = SyntheticSpec(
    "qwen3moe", n_layer=12, n_embd=1024, n_head=16, n_head_kv=4, head_dim=64, n_ff=2048,
    n_expert=32, n_expert_used=4, n_ff_expert=512, context_length=4096,
)  # fmt: skip
# (label, new tokens, cached tokens before the step, logits wanted)
STEPS = (("prompt 256", 256, 0, 1), ("decode 1", 1, CONTEXT, 1), ("decode 16", 16, CONTEXT, 16))


@dataclass(frozen=True)
class Row:
    model: str
    threads: int
    step: str
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        return (self.predicted_s - self.measured_s) / self.measured_s


def measure_and_predict(path: Path, model: CostModel, threads: int, repeats: int) -> list[Row]:
    inventory = read_inventory(path)
    rows = []
    with DecodeTimer(path, n_ctx=1024, n_batch=256, threads=threads) as timer:
        timer.time_step(256, 0, 1, 1)  # page the weights in
        for label, n_tokens, n_past, n_outputs in STEPS:
            if n_past:
                timer.prefill(n_past)
            timer.time_step(n_tokens, n_past, n_outputs, 1)  # the first step of a shape is slow
            measured = timer.time_step(n_tokens, n_past, n_outputs, repeats)
            predicted = model.predict_step(inventory, n_tokens, threads, n_outputs, n_past)
            rows.append(Row(path.stem[:30], threads, label, measured, predicted.seconds))
    return rows


def load_profile(path: str | None) -> Profile:
    if path:
        return Profile.from_json(Path(path).read_text())
    hardware = probe_hardware()
    with ProfileStore() as store:
        stored = store.latest(hardware.fingerprint(), hardware.llama_build)
    if stored is not None:
        return stored
    print("no stored profile for this machine: measuring a fast one first", file=sys.stderr)
    return Profiler(ProfileMode.FAST, hardware=hardware).run()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="profile JSON (default: this machine's stored one)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    profile = load_profile(args.profile)
    model = CostModel(profile)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="costmodel-bench-") as folder:
        paths = [
            default_model_path(),
            write_synthetic_model(
                Path(folder) / "synthetic-dense-1GB-Q8_0.gguf", DENSE_1GB, "Q8_0"
            ),
            write_synthetic_model(Path(folder) / "synthetic-moe-Q4_0.gguf", MOE, "Q4_0"),
        ]
        for path in paths:
            for threads in (1, 2):
                rows.extend(measure_and_predict(path, model, threads, args.repeats))
    report(profile, rows)
    return 0


def report(profile: Profile, rows: list[Row]) -> None:
    print(
        f"costmodel_accuracy: profile {profile.mode.value} of {profile.created_at} "
        f"({profile.fingerprint}), context {CONTEXT} for decode steps"
    )
    print(f"{'model':32}{'thr':>4}  {'step':12}{'measured ms':>12}{'predicted ms':>14}{'error':>9}")
    for row in rows:
        print(
            f"{row.model:32}{row.threads:>4}  {row.step:12}{1000 * row.measured_s:>12.2f}"
            f"{1000 * row.predicted_s:>14.2f}{100 * row.error:>+8.1f}%"
        )
    errors = [abs(r.error) for r in rows]
    median, worst = statistics.median(errors), max(errors)
    print(
        f"median |error| {100 * median:.1f}% (target <= {100 * TARGET_MEDIAN:.0f}%), "
        f"worst {100 * worst:.1f}% (target <= {100 * TARGET_WORST:.0f}%): "
        + ("meets both" if median <= TARGET_MEDIAN and worst <= TARGET_WORST else "MISSES")
    )


if __name__ == "__main__":
    sys.exit(main())
