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

A last case (issue 29) shows working memory as a planning choice: Qwen3-235B-A22B
at 16K context in a 2 GiB budget, where the attention scores alone take 2 GiB at
ubatch 512 without flash attention (a CPU-only plan, half an hour to the first
token); with flash attention and the ubatch chosen per budget it gets a GPU plan.
The script fails when that plan is not a GPU plan.

The last cells (issue 31) join two described 16 GB desktops by 1, 2.5 and 10 GbE and
split a model across them (engine.planning.split_costing): Qwen3-235B-A22B at Q4_0,
which no one of them holds (the split must be chosen), and Qwen3-30B-A3B, which one
holds (the split is chosen only where it is predicted faster). The script fails when
a faster link is predicted slower. The links are assumptions, not measurements: 94%
of the line rate both ways, and round trips of 0.25, 0.2 and 0.1 ms.

    .venv/bin/python bench/plan_simulation.py [--hardware rtx5090-desktop]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from app.cli.commands.plan_command import load_profile_for_planning
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, SubLayerKind, read_inventory
from engine.model.synthetic import write_shape_only_model
from engine.model.synthetic_specs import LLAMA_3_8B, QWEN3_30B_A3B, QWEN3_235B_A22B
from engine.planning.llama_fit import fit_baseline
from engine.planning.llama_placements import layer_offload_baseline, n_cpu_moe_baseline
from engine.planning.plan import Plan, PlanRequest
from engine.planning.planner import make_plan
from engine.planning.split_costing import Computer, predict_split
from engine.planning.vram_account import compute_bytes
from engine.remote.link_measure import LinkFigures

GIB = 1 << 30
BUDGETS_GIB = (2, 4, 8, 16, 24)
CONTEXTS = (1024, 16384)
MODELS = {
    "Qwen3-30B-A3B Q4_0": (QWEN3_30B_A3B, "Q4_0"),
    "Qwen3-235B-A22B Q2_K": (QWEN3_235B_A22B, "Q2_K"),
    "dense 8B F16": (LLAMA_3_8B, "F16"),
}


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
    inventories = {}
    with tempfile.TemporaryDirectory(prefix="plan-simulation-") as folder:
        for name, (spec, quant) in MODELS.items():
            path = write_shape_only_model(Path(folder) / f"{quant}.gguf", spec, quant)
            inventory = inventories[name] = read_inventory(path)
            for context in CONTEXTS:
                for budget in BUDGETS_GIB:
                    line, lost = row(name, inventory, profile, context, budget)
                    print(line)
                    losses += lost
    if losses:
        print(f"{losses} decode speedup(s) below 1.00: the planner lost to llama.cpp")
    on_gpu = working_memory_case(inventories[WORKING_MEMORY_MODEL], profile)
    with tempfile.TemporaryDirectory(prefix="plan-simulation-") as folder:
        lent_right = lent_computers_case(Path(folder))
    return 1 if losses or not on_gpu or not lent_right else 0


LENT_HARDWARE = "desktop-16gb"
LENT_MODELS = {  # shown as: (its shape in MODELS, the quantisation here)
    "Qwen3-235B-A22B Q4_0": ("Qwen3-235B-A22B Q2_K", "Q4_0"),
    "Qwen3-30B-A3B Q4_0": ("Qwen3-30B-A3B Q4_0", "Q4_0"),
}
LINKS = {  # name: (round trip s, line rate bit/s)
    "1 GbE": (0.25e-3, 1e9),
    "2.5 GbE": (0.2e-3, 2.5e9),
    "10 GbE": (0.1e-3, 10e9),
}


def lent_computers_case(folder: Path) -> bool:
    """Two described desktops joined by each link: the best split's prediction against
    one desktop alone; False when a model one desktop cannot hold is not split, or a
    slower link is predicted faster."""
    profile = load_profile_for_planning(LENT_HARDWARE)
    vram = profile.gpu.vram_total_bytes - GIB if profile.gpu else 0
    desktops = [Computer(f"desktop-{n}", profile, vram) for n in (1, 2)]
    print(f"\ntwo {LENT_HARDWARE} computers ({desktops[0].memory_bytes / GIB:.0f} GiB each for "
          "the model: free RAM and VRAM, each less 1 GiB), 4096 context")  # fmt: skip
    right = True
    for name, (shape, quant) in LENT_MODELS.items():
        spec = MODELS[shape][0]
        path = write_shape_only_model(folder / f"{spec.n_layer}-{quant}.gguf", spec, quant)
        inventory = read_inventory(path)
        speeds = []
        for link_name, (round_trip, rate) in LINKS.items():
            link = LinkFigures(round_trip, rate / 8 * 0.94, rate / 8 * 0.94)
            cell = predict_split(inventory, 4096, desktops[0], desktops[1:], [link])
            chosen = "" if cell.chosen else " - not chosen"
            print(f"  {name:22}{link_name:>8}: {cell.describe()}{chosen}")
            right &= cell.chosen or cell.alone_tokens_per_s is not None
            speeds.append(cell.decode_tokens_per_s)
        right &= speeds == sorted(speeds)
    return right


WORKING_MEMORY_MODEL = "Qwen3-235B-A22B Q2_K"


def working_memory_case(inventory: ModelInventory, profile: Profile) -> bool:
    """Issue 29's case: flash attention and the ubatch decide whether 2 GiB holds a GPU plan."""
    request = PlanRequest(2 * GIB, n_ctx=16384, prompt_tokens=16384)
    ours = make_plan(inventory, profile, request)
    cpu_only = make_plan(inventory, profile, PlanRequest(0, n_ctx=16384, prompt_tokens=16384))
    scores = compute_bytes(inventory, request, 512, flash_attn=False) / GIB
    flash = compute_bytes(inventory, request, 512, flash_attn=True) / GIB
    attention = sum(kind is SubLayerKind.ATTENTION for _block, kind in ours.resident)
    print(
        f"\nworking memory: {WORKING_MEMORY_MODEL}, 16384 context, 2 GiB budget\n"
        f"  compute buffer at ubatch 512: {scores:.2f} GiB without flash attention, "
        f"{flash:.2f} GiB with it (before copies of streamed weights)\n"
        f"  CPU only (without flash attention the budget held no GPU plan): {_speeds(cpu_only)}\n"
        f"  ours: {_speeds(ours)} "
        f"(flash attention {'on' if ours.flash_attn else 'off'}, ubatch {ours.n_ubatch}, "
        f"{attention} blocks' attention and KV cache in VRAM, compute "
        f"{ours.vram.compute_bytes / GIB:.2f} GiB): {ours.reason}"
    )
    return bool(ours.resident)


def _speeds(plan: Plan) -> str:
    return f"{plan.predicted_decode_tokens_per_s:.2f} tok/s, TTFT {plan.predicted_ttft_s:.0f} s"


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
        f"{ours.reason} (ubatch {ours.n_ubatch}{', flash attention' if ours.flash_attn else ''}, "
        f"offload from {_boundary(ours)})",
        lost,
    )


def _ttft_ratio(base: Plan, ours: Plan) -> float:
    return base.predicted_ttft_s / ours.predicted_ttft_s


def _boundary(plan: Plan) -> str:
    return "never" if plan.op_offload_min_batch >= 1 << 30 else str(plan.op_offload_min_batch)


if __name__ == "__main__":
    sys.exit(main())
