"""How well the cost model predicts real llama_decode steps on this machine.

For the default model and two synthetic ones (a dense model of about 1 GB and
an MoE model), at 1 and 2 threads, it measures a 256-token prompt step
(tier 256, from an empty cache) and 1- and 16-token decode steps (tiers 1 and
16, after a 256-token context, logits for every new token), and prints the
cost model's prediction next to each with the relative error. The profile is
this machine's stored one (`shardchat profile --fast` makes it), or a JSON
file given with --profile; with neither, a fast profile is measured first.

With --gpu every layer is on the GPU (the profile's GPU figures predict) and
the steps are smaller: a 64-token prompt step and the same decode steps, on the
default model and two small synthetic ones, because on a software GPU
(lavapipe: about 1-2 GFLOPS) the CPU sizes take minutes a step. lavapipe's
absolute speed means nothing; the errors show whether predictions made from
what the profiler measured on a device track what that device then does.

With --calibration nothing is measured: the described machines' predictions
are set against figures published with llama.cpp on those machines
(engine.machine.calibration), row by row.

    .venv/bin/python bench/costmodel_accuracy.py [--profile FILE] [--repeats 3]
    .venv/bin/python bench/costmodel_accuracy.py --calibration  # published figures, no GPU
    GGML_VK_VISIBLE_DEVICES=0 GGML_VK_DISABLE_F16=1 GGML_VK_DISABLE_COOPMAT=1 \
        .venv/bin/python bench/costmodel_accuracy.py --gpu
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench_profile import profile_for_bench

from engine.machine.profile import Profile
from engine.model.default_model import default_model_path
from engine.model.inventory import SubLayerKind, read_inventory
from engine.model.synthetic import write_synthetic_model
from engine.model.synthetic_spec import SyntheticSpec
from engine.model.synthetic_specs import SMALL_DENSE, SMALL_MOE
from engine.planning.calibration_check import predict_all, table
from engine.planning.cost_model import ALL_CPU, CostModel, Placement, Where
from engine.profiling.decode_timer import DecodeTimer

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
GPU_STEPS = (("prompt 64", 64, 0, 1), *STEPS[1:])
ALL_LAYERS = 9999
# everything on the GPU but the token embedding, which llama.cpp keeps in host memory
ALL_GPU = Placement(Where.GPU, {(None, SubLayerKind.TOKEN_EMBEDDING): Where.CPU})


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


def measure_and_predict(
    path: Path, model: CostModel, threads: int, repeats: int, gpu: bool = False
) -> list[Row]:
    inventory = read_inventory(path)
    steps, placement = (GPU_STEPS, ALL_GPU) if gpu else (STEPS, ALL_CPU)
    n_batch = max(n for _, n, _, _ in steps)
    rows = []
    with DecodeTimer(
        path, n_ctx=1024, n_batch=n_batch, threads=threads, n_gpu_layers=ALL_LAYERS if gpu else 0
    ) as timer:
        timer.time_step(n_batch, 0, 1, 1)  # page the weights in
        for label, n_tokens, n_past, n_outputs in steps:
            if n_past:
                timer.prefill(n_past)
            timer.time_step(n_tokens, n_past, n_outputs, 1)  # the first step of a shape is slow
            measured = timer.time_step(n_tokens, n_past, n_outputs, repeats)
            predicted = model.predict_step(
                inventory, n_tokens, threads, n_outputs, n_past, placement
            )
            rows.append(Row(path.stem[:30], threads, label, measured, predicted.seconds))
    return rows


def load_profile(path: str | None) -> Profile:
    if path:
        return Profile.from_json(Path(path).read_text())
    return profile_for_bench()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="profile JSON (default: this machine's stored one)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gpu", action="store_true", help="every layer on the GPU")
    parser.add_argument(
        "--calibration",
        action="store_true",
        help="no measuring: the described machines against published llama.cpp figures",
    )
    args = parser.parse_args()
    if args.calibration:
        print(table(predict_all()))
        return 0
    profile = load_profile(args.profile)
    if args.gpu and profile.gpu is None:
        print("costmodel_accuracy: the profile has no GPU figures", file=sys.stderr)
        return 2
    model = CostModel(profile)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="costmodel-bench-") as folder:
        for path in _models(Path(folder), args.gpu):
            for threads in (1,) if args.gpu else (1, 2):
                rows.extend(measure_and_predict(path, model, threads, args.repeats, args.gpu))
    report(profile, rows, args.gpu)
    return 0


def _models(folder: Path, gpu: bool) -> list[Path]:
    if gpu:
        return [
            default_model_path(),
            write_synthetic_model(folder / "synthetic-dense-85MB-Q8_0.gguf", SMALL_DENSE, "Q8_0"),
            write_synthetic_model(folder / "synthetic-moe-Q4_0.gguf", SMALL_MOE, "Q4_0"),
        ]
    return [
        default_model_path(),
        write_synthetic_model(folder / "synthetic-dense-1GB-Q8_0.gguf", DENSE_1GB, "Q8_0"),
        write_synthetic_model(folder / "synthetic-moe-Q4_0.gguf", MOE, "Q4_0"),
    ]


def report(profile: Profile, rows: list[Row], gpu: bool = False) -> None:
    where = f"every layer on {profile.gpu.name}" if gpu and profile.gpu else "CPU"
    print(
        f"costmodel_accuracy: profile {profile.mode.value} of {profile.created_at} "
        f"({profile.fingerprint}), {where}, context {CONTEXT} for decode steps"
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
