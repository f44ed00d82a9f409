"""Our plan against llama.cpp's own placements on this machine's GPU, measured side by side.

Writes a shape-true synthetic MoE model (Qwen3-30B-A3B's shapes, Q4_0, random weights;
`--spec small`: a small MoE a software GPU computes in seconds), then at each VRAM
budget runs a prompt and a few decode steps under every placement, each in a fresh
process (the op-offload boundary is read once per process):
- ours: the planner's plan, with the staging slots it chose;
- ours serial: the same plan with each streamed weight copied when its split starts
  (only where the planner chose slots): the executor on against off;
- -ngl, --n-cpu-moe, --fit: llama.cpp's placements for the same budget
  (engine.planning.llama_placements; --fit is checked against llama.cpp's own tool in
  tests/gpu/test_fit_params.py).
For each it prints prompt and decode tokens/s, their ratio to ours, and llama.cpp's
device buffers (its own log lines: CUDA0 or Vulkan0) against the plan's account.

    python3 bench/gpu_plan_check.py [--spec 30b|small] [--budgets-mib 2048,4096,8192]
        [--prompt 1024] [--profile PROFILE.json] [--folder /tmp/shardchat-gpu-models]

Without --profile the machine is profiled first (fast). bench/gpu_check.sh runs it,
on a lent NVIDIA machine and here (CPU and lavapipe).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from engine.child_process import run_in_child
from engine.machine.hardware import probe_hardware
from engine.machine.profile import Profile, ProfileMode
from engine.model.inventory import ModelInventory, read_inventory
from engine.model.synthetic import write_synthetic_model
from engine.model.synthetic_specs import QWEN3_30B_A3B_SMALL_TOKENIZER, SMALL_MOE
from engine.planning.llama_fit import fit_baseline
from engine.planning.llama_placements import layer_offload_baseline, n_cpu_moe_baseline
from engine.planning.plan import Plan, PlanRequest
from engine.planning.planner import make_plan
from engine.profiling.profiler import Profiler
from engine.runtime.prompt_timing import PromptTiming, time_prompt

MIB = 1 << 20
GIB = 1 << 30
SPECS = {"30b": QWEN3_30B_A3B_SMALL_TOKENIZER, "small": SMALL_MOE}
QUANT = {"30b": "Q4_0", "small": "Q8_0"}


def placements(inventory: ModelInventory, profile: Profile, budget: int, n_prompt: int):
    """(label, plan) for ours, ours without slots, and each llama.cpp placement that applies."""
    request = PlanRequest(budget, n_ctx=n_prompt + 64, prompt_tokens=n_prompt)
    ours = make_plan(inventory, profile, request)
    found: list[tuple[str, Plan | None]] = [("ours", ours)]
    if ours.prefetch_slots:
        found.append(("ours serial", replace(ours, prefetch_slots=0)))
    found += [
        ("-ngl", layer_offload_baseline(inventory, profile, request)),
        ("--n-cpu-moe", n_cpu_moe_baseline(inventory, profile, request)),
        ("--fit", fit_baseline(inventory, profile, request)),
    ]
    return [(label, plan) for label, plan in found if plan is not None]


def machine_profile(path: Path | None) -> Profile:
    if path is not None:
        return Profile.from_json(path.read_text())
    print("profiling this machine (fast)…", flush=True)
    return Profiler(ProfileMode.FAST, hardware=probe_hardware()).run()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", choices=sorted(SPECS), default="30b")
    parser.add_argument("--budgets-mib", default="2048,4096,8192")
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/shardchat-gpu-models"))
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    path = args.folder / f"{args.spec}-shapes-{QUANT[args.spec]}.gguf"
    if not path.exists():
        write_synthetic_model(path, SPECS[args.spec], QUANT[args.spec])
    inventory = read_inventory(path)
    profile = machine_profile(args.profile)
    gpu = profile.gpu.name if profile.gpu else "no GPU"
    print(f"gpu_plan_check: {path.name} ({inventory.file_bytes / GIB:.2f} GiB) on {gpu}")
    print(f"prompt {args.prompt} tokens, then 16 decode steps; ratios are ours over theirs")
    print(
        f"{'budget':>8} {'placement':<12} {'prompt tok/s':>12} {'decode tok/s':>12} "
        f"{'ours/it':>13} {'device MiB':>10} {'account MiB':>11}  plan"
    )
    for budget_mib in (int(b) for b in args.budgets_mib.split(",")):
        timings: dict[str, PromptTiming] = {}
        for label, plan in placements(inventory, profile, budget_mib * MIB, args.prompt):
            outcome = run_in_child(time_prompt, (plan, inventory, args.prompt), timeout_s=900)
            if not outcome.ok:
                print(f"{budget_mib:>6}Mi {label:<12} failed: {outcome.failure}", flush=True)
                continue
            timing = timings[label] = outcome.value
            ours = timings.get("ours", timing)
            ratio = (
                f"{ours.prompt_tokens_per_s / timing.prompt_tokens_per_s:.2f}/"
                f"{ours.decode_tokens_per_s / timing.decode_tokens_per_s:.2f}"
            )
            account = plan.vram.total_bytes - plan.vram.margin_bytes
            print(
                f"{budget_mib:>6}Mi {label:<12} {timing.prompt_tokens_per_s:>12.1f} "
                f"{timing.decode_tokens_per_s:>12.2f} {ratio:>13} "
                f"{timing.allocated.device_bytes / MIB:>10.1f} {account / MIB:>11.1f}  "
                f"{plan.reason[:60]}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
