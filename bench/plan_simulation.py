"""Our plans against what llama.cpp users choose themselves, simulated on a described machine.

Shape-true models (written shape-only: headers and tensor tables, the data a
hole in a sparse file) are planned on the described RTX 5090-class desktop at
several VRAM budgets and contexts; the cost model predicts decode tokens/s and
time to first token (a prompt as long as the context) for our plan and for
llama.cpp's own placements at the same budget (engine.planning.llama_placements): the
largest whole-layer n_gpu_layers, the best --n-cpu-moe (MoE models only) and
what --fit picks. It prints our figures and, against each, the decode speedup
and the TTFT speedup (theirs / ours); every decode speedup must be at least 1.00,
and the script fails when one is not.

    .venv/bin/python bench/plan_simulation.py [--hardware rtx5090-desktop]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from app.commands.plan_command import load_profile_for_planning
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, read_inventory
from engine.model.synthetic import write_shape_only_model
from engine.model.synthetic_spec import SyntheticSpec
from engine.planning.llama_fit import fit_baseline
from engine.planning.llama_placements import layer_offload_baseline, n_cpu_moe_baseline
from engine.planning.plan import Plan, PlanRequest
from engine.planning.planner import make_plan

GIB = 1 << 30
BUDGETS_GIB = (2, 4, 8, 16, 24)
CONTEXTS = (1024, 16384)
MODELS = {
    "Qwen3-30B-A3B Q4_0": (
        SyntheticSpec(
            "qwen3moe", n_layer=48, n_embd=2048, n_head=32, n_head_kv=4, head_dim=128,
            n_ff=6144, n_expert=128, n_expert_used=8, n_ff_expert=768, vocab_size=151936,
            context_length=40960,
        ),
        "Q4_0",
    ),
    "Qwen3-235B-A22B Q2_K": (
        SyntheticSpec(
            "qwen3moe", n_layer=94, n_embd=4096, n_head=64, n_head_kv=4, head_dim=128,
            n_ff=12288, n_expert=128, n_expert_used=8, n_ff_expert=1536, vocab_size=151936,
            context_length=40960,
        ),
        "Q2_K",
    ),
    "dense 8B F16": (
        SyntheticSpec(
            "llama", n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, n_ff=14336,
            vocab_size=128256, context_length=131072,
        ),
        "F16",
    ),
}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="rtx5090-desktop")
    args = parser.parse_args()
    profile = load_profile_for_planning(args.hardware)
    print(
        f"plan_simulation on {args.hardware} ({profile.mode.value} profile): ours vs llama.cpp's "
        "own placements, speedups as decode x / TTFT x (higher is better for ours)"
    )
    print(
        f"{'model':22}{'ctx':>6}{'VRAM':>6}  {'ours tok/s':>10}{'TTFT s':>8}  "
        f"{'vs n_gpu_layers':>15}  {'vs n_cpu_moe':>13}  {'vs fit':>13}  our plan"
    )
    losses = 0
    with tempfile.TemporaryDirectory(prefix="plan-simulation-") as folder:
        for name, (spec, quant) in MODELS.items():
            path = write_shape_only_model(Path(folder) / f"{quant}.gguf", spec, quant)
            inventory = read_inventory(path)
            for context in CONTEXTS:
                for budget in BUDGETS_GIB:
                    line, lost = row(name, inventory, profile, context, budget)
                    print(line)
                    losses += lost
    if losses:
        print(f"{losses} decode speedup(s) below 1.00: the planner lost to llama.cpp")
    return 1 if losses else 0


def row(
    name: str, inventory: ModelInventory, profile: Profile, context: int, budget_gib: int
) -> tuple[str, int]:
    """One table row, and how many baselines decode faster than our plan in it."""
    request = PlanRequest(budget_gib * GIB, n_ctx=context, prompt_tokens=context)
    ours = make_plan(inventory, profile, request)
    baselines = [
        layer_offload_baseline(inventory, profile, request),
        n_cpu_moe_baseline(inventory, profile, request),
        fit_baseline(inventory, profile, request),
    ]
    cells, lost = [], 0
    for base in baselines:
        if base is None:
            cells.append(f"{'-':>13}")
            continue
        decode = ours.predicted_decode_tokens_per_s / base.predicted_decode_tokens_per_s
        lost += decode < 1.0 - 1e-9
        cells.append(f"{decode:>6.2f}/{_ttft_ratio(base, ours):>5.2f}")
    return (
        f"{name:22}{context:>6}{budget_gib:>4}GB  "
        f"{ours.predicted_decode_tokens_per_s:>10.1f}{ours.predicted_ttft_s:>8.2f}  "
        f"{cells[0]:>15}  {cells[1]:>13}  {cells[2]:>13}  "
        f"{ours.reason} (ubatch {ours.n_ubatch}, offload from {_boundary(ours)})",
        lost,
    )


def _ttft_ratio(base: Plan, ours: Plan) -> float:
    return base.predicted_ttft_s / ours.predicted_ttft_s


def _boundary(plan: Plan) -> str:
    return "never" if plan.op_offload_min_batch >= 1 << 30 else str(plan.op_offload_min_batch)


if __name__ == "__main__":
    sys.exit(main())
