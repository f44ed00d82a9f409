"""Our plans against whole-layer n_gpu_layers offload, simulated on a described machine.

Shape-true models (written shape-only: headers and tensor tables, the data a
hole in a sparse file) are planned on the described RTX 5090-class desktop at
several VRAM budgets and contexts; the cost model predicts decode tokens/s and
time to first token (a prompt as long as the context) for our plan and for
llama.cpp's whole-layer offload at the same budget, and prints the speedups.

    .venv/bin/python bench/plan_simulation.py [--hardware rtx5090-desktop]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from app.plan_command import load_profile_for_planning
from engine.inventory import read_inventory
from engine.plan import PlanRequest
from engine.planner import layer_offload_baseline, make_plan
from engine.synthetic import SyntheticSpec, write_shape_only_model

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
    print(f"plan_simulation on {args.hardware} ({profile.mode.value} profile): ours vs whole-layer")
    print(
        f"{'model':22}{'ctx':>6}{'VRAM':>6}  {'decode tok/s':>21}{'x':>7}  "
        f"{'TTFT s':>17}{'x':>7}  plan"
    )
    with tempfile.TemporaryDirectory(prefix="plan-simulation-") as folder:
        for name, (spec, quant) in MODELS.items():
            path = write_shape_only_model(Path(folder) / f"{quant}.gguf", spec, quant)
            inventory = read_inventory(path)
            for context in CONTEXTS:
                for budget in BUDGETS_GIB:
                    print(row(name, inventory, profile, context, budget))
    return 0


def row(name: str, inventory, profile, context: int, budget_gib: int) -> str:
    request = PlanRequest(budget_gib * GIB, n_ctx=context, prompt_tokens=context)
    ours = make_plan(inventory, profile, request)
    base = layer_offload_baseline(inventory, profile, request)
    decode = ours.predicted_decode_tokens_per_s / base.predicted_decode_tokens_per_s
    ttft = base.predicted_ttft_s / ours.predicted_ttft_s
    return (
        f"{name:22}{context:>6}{budget_gib:>4}GB  "
        f"{ours.predicted_decode_tokens_per_s:>9.1f} vs {base.predicted_decode_tokens_per_s:>7.1f}"
        f"{decode:>6.2f}x  {ours.predicted_ttft_s:>7.2f} vs {base.predicted_ttft_s:>6.2f}"
        f"{ttft:>6.2f}x  ubatch {ours.n_ubatch}, offload from {ours.op_offload_min_batch}, "
        f"{len(ours.resident)} sub-layers resident; baseline {base.reason}"
    )


if __name__ == "__main__":
    sys.exit(main())
