"""Prompt throughput with streamed weights uploaded ahead (staging slots) against serial copies.

One plan that keeps part of a model in host memory, so that every prompt step streams
the rest to the GPU: for each prompt size the prompt runs with the scheduler's
staging slots and with its serial copies, alternately, each in a fresh process (the
op-offload boundary is read once per process), and prints prompt tokens/s of both,
their ratio, the cost model's predicted ratio beside it, and decode tokens/s of
both (the executor must not slow decode). The figures are ratios measured side by
side, as the machines are shared.

    .venv/bin/python bench/streamed_prefill.py [--sizes 512 2048 8192] [--vram-mib 40]
        [--model FILE.gguf] [--profile PROFILE.json] [--slots 3] [--rounds 1]

Without --model it writes a small synthetic dense model (lavapipe computes on the CPU:
the default model would take hours at 8,192 tokens); without --profile the cost model
uses the stored profile of this machine, else the recorded lavapipe profile of
tests/data. On lavapipe, run it with the GPU tier's environment (GGML_VK_VISIBLE_DEVICES=0
GGML_VK_DISABLE_F16=1 GGML_VK_DISABLE_COOPMAT=1, as `make test-gpu` sets it).

Last run: see README ("Streamed prompts, uploaded ahead").
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

from engine.child_process import run_in_child
from engine.llama.offload_boundary import LLAMA_CPP_DEFAULT
from engine.machine.profile import Profile
from engine.model.inventory import ModelInventory, read_inventory
from engine.model.synthetic import write_synthetic_model
from engine.model.synthetic_spec import SyntheticSpec
from engine.planning.cost_model import CostModel, Placement, Where
from engine.planning.plan import Plan, PlanRequest
from engine.planning.planner import make_plan
from engine.planning.tier_costing import chunked_ttft, with_offload_boundary
from engine.runtime.prompt_timing import PromptTiming, time_prompt

MIB = 1024 * 1024
ROOT = Path(__file__).resolve().parent.parent
LAVAPIPE_PROFILE = ROOT / "tests" / "data" / "profile-lavapipe-fast.json"
# small enough for lavapipe at 8,192 tokens, with the context for them
# (not synthetic_specs.SMALL_DENSE)
LONG_PROMPT_DENSE = SyntheticSpec(
    "llama", n_layer=6, n_embd=512, n_head=8, n_head_kv=4, n_ff=1536, vocab_size=4096,
    context_length=16384,
)  # fmt: skip


def predicted_gain(plan: Plan, inventory: ModelInventory, profile: Profile, n_prompt: int) -> float:
    """The cost model's prompt time, serial over staged, for this prompt in n_ubatch steps."""
    model = CostModel(profile)
    resident = {key: Where.GPU for key in plan.resident}
    sized = replace(plan, request=replace(plan.request, prompt_tokens=n_prompt))
    serial = Placement(Where.STREAMED, resident)
    ahead = replace(serial, prefetch_slots=plan.prefetch_slots)
    threads = plan.n_threads_batch
    return chunked_ttft(inventory, model, serial, threads, sized) / chunked_ttft(
        inventory, model, ahead, threads, sized
    )


def load_profile(path: Path | None) -> Profile:
    if path is not None:
        return Profile.from_json(path.read_text())
    from app.model_lifecycle.load_planning import stored_profile

    stored = stored_profile()
    return stored if stored and stored.gpu else Profile.from_json(LAVAPIPE_PROFILE.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--vram-mib", type=int, default=40)
    parser.add_argument("--model", type=Path)
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--slots", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        written = Path(folder) / "dense.gguf"
        path = args.model or write_synthetic_model(written, LONG_PROMPT_DENSE, "Q8_0")
        inventory = read_inventory(path)
        profile = load_profile(args.profile)
        request = PlanRequest(args.vram_mib * MIB, n_ctx=max(args.sizes) + 64)
        plan = make_plan(inventory, profile, request)
        print(f"{inventory.name}, {args.vram_mib} MiB: {plan.reason}")
        print(f"planner: {plan.prefetch_slots} slots ({plan.prefetch_reason})")
        if plan.op_offload_min_batch > plan.n_ubatch:
            # the planner would run these prompts on the CPU here: stream them anyway, as
            # llama.cpp does by default, for the executor is what is measured
            plan = with_offload_boundary(plan, LLAMA_CPP_DEFAULT)
            print(f"prompts forced to stream from {LLAMA_CPP_DEFAULT} tokens per step")
        staged = replace(plan, prefetch_slots=args.slots)
        serial = replace(plan, prefetch_slots=0)
        print(
            f"{'prompt':>7} {'serial tok/s':>13} {'ahead tok/s':>12} {'ratio':>6} "
            f"{'predicted':>9} {'decode serial':>14} {'decode ahead':>13}"
        )
        for n_prompt in args.sizes:
            runs: dict[str, list[PromptTiming]] = {"serial": [], "ahead": []}
            for _ in range(args.rounds):
                for name, which in (("serial", serial), ("ahead", staged)):
                    outcome = run_in_child(
                        time_prompt, (which, inventory, n_prompt), timeout_s=3600
                    )
                    assert outcome.ok, outcome.failure
                    runs[name].append(outcome.value)
            prompt = {
                k: statistics.median(r.prompt_tokens_per_s for r in v) for k, v in runs.items()
            }
            decode = {
                k: statistics.median(r.decode_tokens_per_s for r in v) for k, v in runs.items()
            }
            gain = predicted_gain(staged, inventory, profile, n_prompt)
            print(
                f"{n_prompt:>7} {prompt['serial']:>13.1f} {prompt['ahead']:>12.1f} "
                f"{prompt['ahead'] / prompt['serial']:>6.2f} {gain:>9.2f} "
                f"{decode['serial']:>14.2f} {decode['ahead']:>13.2f}",
                flush=True,
            )
        print(runs["ahead"][0].staging_line or "no staging line: the executor did not engage")


if __name__ == "__main__":
    main()
