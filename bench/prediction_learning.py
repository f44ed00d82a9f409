"""How much the step correction improves the plan's predictions over a real session.

The default model runs on this machine's CPU under its plan; a scripted chat (the
same questions, greedy replies) makes a few hundred llama_decode steps, each
logged by the step log with a fresh correction learning as it goes
(engine.planning.step_correction). It prints the median absolute prediction
error (relative to the measured time) of the first 50 steps, the last 50 and
all, as predicted (cost model x the correction learned so far) and as the cost
model alone predicted the same steps, and the ratios: corrected / alone says
what the correction bought; on a shared machine the load can change mid-run,
which moves both. The profile is this machine's stored one (`shardchat profile
--fast` makes it), or a JSON file given with --profile; with neither, a fast
profile is measured first and stored. Nothing learned here is stored.

    .venv/bin/python bench/prediction_learning.py [--profile FILE] [--steps 300]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from bench_profile import profile_for_bench

from engine.generation.sampling import GREEDY
from engine.machine.profile import Profile
from engine.model.default_model import default_model_path
from engine.model.inventory import read_inventory
from engine.planning.execution import load_params_for
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan
from engine.planning.step_correction import StepCorrections
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import load_model
from engine.runtime.step_log import StepLog, StepRecord

WINDOW = 50  # steps at each end of the session
N_CTX = 2048
REPLY_TOKENS = 64
QUESTIONS = (
    "Name three colours.",
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain what a CPU does in one paragraph.",
    "List five animals that live in the ocean.",
    "How do plants make food?",
    "Give me a recipe for pancakes.",
    "Why is the sky blue?",
)


def session_steps(profile: Profile, n_steps: int) -> list[StepRecord]:
    """Every llama_decode of a scripted chat on the default model, until n_steps were made;
    a new conversation whenever the window would fill."""
    path = default_model_path()
    inventory = read_inventory(path)
    plan = make_plan(inventory, profile, PlanRequest(0, n_ctx=N_CTX))
    model = load_model(load_params_for(plan, inventory, str(path)))
    try:
        log = StepLog(model, plan, profile, corrections=StepCorrections()).attach()
        records: list[StepRecord] = []
        chat = ChatSession(model)
        turn = 0
        while len(records) < n_steps:
            if turn and turn % 4 == 0:
                chat = ChatSession(model)
            question = QUESTIONS[turn % len(QUESTIONS)]
            chat.reply(question, GREEDY.with_changes(max_tokens=REPLY_TOKENS))
            records += log.drain()
            turn += 1
        return records[:n_steps]
    finally:
        model.close()


def median_error(records: Sequence[StepRecord], predicted: Callable[[StepRecord], float]) -> float:
    """Median of |predicted - measured| / measured."""
    return statistics.median(abs(predicted(r) - r.measured_ms) / r.measured_ms for r in records)


def report(records: list[StepRecord]) -> None:
    """Median errors at both ends of the session, corrected and by the cost model alone."""
    decode = [r for r in records if r.n_tokens == 1]
    print(
        f"{len(records)} steps ({len(decode)} of one token), "
        f"{sum(r.measured_ms for r in records) / 1e3:.1f} s measured"
    )
    print(f"{'median |error| / measured':<26}{'corrected':>10}{'model alone':>13}{'ratio':>8}")
    corrected_at: dict[str, float] = {}
    for label, window in (
        (f"first {WINDOW} steps", records[:WINDOW]),
        (f"last {WINDOW} steps", records[-WINDOW:]),
        ("all steps", records),
    ):
        corrected = median_error(window, lambda r: r.predicted_ms)
        alone = median_error(window, lambda r: r.model_ms)
        corrected_at[label] = corrected
        print(f"{label:<26}{corrected:>10.1%}{alone:>13.1%}{corrected / alone:>8.2f}")
    first, last = corrected_at[f"first {WINDOW} steps"], corrected_at[f"last {WINDOW} steps"]
    print(f"corrected, last {WINDOW} / first {WINDOW}: {last / first:.2f}")
    learned = {r.key: r.correction for r in records}  # the last of each family and tier
    for key, correction in sorted(learned.items()):
        print(
            f"correction of {key.family.value} tier {key.tier}: "
            f"x{correction.factor:.2f} after {correction.steps} steps"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, help="a profile JSON file (default: stored)")
    parser.add_argument("--steps", type=int, default=300, help="llama_decode steps to run")
    args = parser.parse_args()
    profile = Profile.from_json(args.profile.read_text()) if args.profile else profile_for_bench()
    print(f"profile: {profile.mode.value}, measured {profile.created_at}")
    report(session_steps(profile, max(args.steps, 2 * WINDOW)))


if __name__ == "__main__":
    main()
