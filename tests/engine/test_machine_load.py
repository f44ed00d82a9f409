"""How busy other programs keep the machine: psutil samples, the arithmetic, repeats, verdict.

Samples are read from this machine while real processes load it (a busy loop
that is another program, one that is our own child); nothing is a recorded
constant except the verdict's threshold cases at the end.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace

import psutil
import pytest

from engine.machine.profile import MachineLoad, Profile, Quietness, StepLoad
from engine.profiling.machine_load import (
    OWN_CHILDREN_COUNTED,
    QUIET_SHARE,
    TOO_BUSY_SHARE,
    GpuUtilisation,
    LoadWatch,
    machine_load,
    other_share,
    take_sample,
)
from tests.engine.competing_load import competing_load

pytestmark = pytest.mark.serial  # it measures this machine: see the marker

WINDOW_S = 0.4  # the window being measured; samples count 10 ms ticks
TICKS_S = 0.05  # what tick rounding can cost a share's CPU seconds across both samples


def cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        times = process.cpu_times()
        total += times.user + times.system
    return total


def test_another_programs_busy_loops_count_as_other_load() -> None:
    with competing_load() as loops:
        assert not set(loops) & set(psutil.Process().children(recursive=True))
        loops_before, first = cpu_seconds(loops), take_sample()
        time.sleep(WINDOW_S)  # the window measured, not a wait for an event
        last, loops_after = take_sample(), cpu_seconds(loops)
    share = other_share(first, last)
    machine_seconds = (last.at - first.at) * len(first.busy_s)
    assert share * machine_seconds >= loops_after - loops_before - TICKS_S
    assert share >= TOO_BUSY_SHARE, f"{share:.2f} with a loop on every core"


@pytest.mark.skipif(not OWN_CHILDREN_COUNTED, reason="only Linux counts reaped children")
def test_our_own_child_is_not_other_load_even_once_it_has_ended() -> None:
    """A profiling step is a child that ends before the step's last sample: its CPU is ours."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"
    first = take_sample()
    subprocess.run([sys.executable, "-c", burn], check=True, timeout=30)  # reaped on return
    last = take_sample()
    own = last.own_s - first.own_s
    assert own >= 0.4
    everyone = sum(b - a for a, b in zip(first.busy_s, last.busy_s, strict=True))
    machine_seconds = (last.at - first.at) * len(first.busy_s)
    assert other_share(first, last) * machine_seconds <= everyone - own + TICKS_S


def test_a_steady_load_costs_one_repeat_and_makes_the_run_too_busy() -> None:
    watch = LoadWatch(max_repeats=5)
    attempts: list[str] = []
    repeated: list[str] = []

    def attempt(label: str) -> str:
        attempts.append(label)
        sum(range(200_000))  # our own work: not what disturbs the step
        return f"{label} #{attempts.count(label)}"

    with competing_load():
        first = watch.run("first", lambda: attempt("first"), lambda _v: True, again=repeated.append)
        second = watch.run("second", lambda: attempt("second"), lambda _v: True)
        crashed = watch.run("crashed", lambda: attempt("crashed"), lambda _v: False)
    assert first.load.attempts == 2 and repeated == ["first"]
    assert first.value in {"first #1", "first #2"}
    assert second.load.attempts == 1  # the repeat was disturbed too: the load is steady
    assert crashed.load.attempts == 1  # a failed step is not repeated for load
    assert watch.repeats_left == 0
    assert all(step.load.other_cpu_share >= QUIET_SHARE for step in (first, second))

    load = watch.verdict()
    assert load.verdict is Quietness.TOO_BUSY and not load.trustworthy
    assert load.steps_repeated == 1
    assert [s.step for s in load.steps] == ["first", "second", "crashed"]
    assert load.other_cpu_share >= TOO_BUSY_SHARE
    assert load.busiest_share == max(s.other_cpu_share for s in load.steps)


def test_a_short_disturbed_step_makes_a_long_run_busy_not_too_busy() -> None:
    """The run's share is weighted by each step's time; one busy step still flags the profile."""
    quiet = StepLoad("dense Q4_0", 0.02, 1)
    disturbed = StepLoad("head", 0.9, 3)
    assert machine_load([(quiet, 9.0), (disturbed, 1.0)], 2).verdict is Quietness.BUSY
    assert machine_load([(quiet, 1.0), (disturbed, 9.0)], 2).verdict is Quietness.TOO_BUSY
    assert machine_load([(quiet, 5.0)], 0).verdict is Quietness.QUIET
    busy_gpu = StepLoad("gpu dense Q4_0", 0.0, 1, other_gpu_percent=55.0)
    assert machine_load([(quiet, 9.0), (busy_gpu, 1.0)], 0).verdict is Quietness.TOO_BUSY


def test_the_record_round_trips_and_older_profiles_load_without_it(recorded_profile) -> None:
    older = recorded_profile
    assert older.machine_load is None
    steps = (StepLoad("fixed costs", 0.31, 2), StepLoad("gpu dense Q4_0", 0.05, 1, 12.0))
    load = MachineLoad(Quietness.BUSY, 0.2, "fixed costs", 0.31, 1, steps)
    flagged = replace(older, machine_load=load)
    assert Profile.from_json(flagged.to_json()) == flagged
    assert '"verdict": "busy"' in flagged.to_json()


def test_the_gpu_reading_is_a_percentage_or_unknown_never_an_error() -> None:
    """Without an NVIDIA driver (as here) NVML cannot start: unknown, and the run goes on."""
    gpu = GpuUtilisation()
    try:
        percent = gpu.percent()
    finally:
        gpu.close()
    assert percent is None or 0.0 <= percent <= 100.0
    assert gpu.percent() is None  # closed
