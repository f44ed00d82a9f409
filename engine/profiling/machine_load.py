"""How busy other programs keep this machine while the profiler measures it.

A step timed beside a browser build or a game runs slower than llama.cpp runs
alone, and a plan made from it predicts far too little (issue 29: 0.9 tokens/s
predicted, 21.8 measured). So every step is watched: a short window just
before it, when nothing of ours runs, and the whole step, with this process's
own CPU time (its child included) taken out of the system's. A disturbed step
is measured once more, within a budget for the run, and the less disturbed
attempt is kept; the run ends with a `MachineLoad` verdict on the profile.

The arithmetic works on `CpuSample`s, plain numbers that psutil gives, so it
can be checked on recorded samples. The GPU is read through NVML where an
NVIDIA driver is present (its utilisation just before a GPU step); elsewhere
that part is simply unknown.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import psutil

from engine.machine.profile import MachineLoad, Quietness, StepLoad

log = logging.getLogger(__name__)

T = TypeVar("T")

# Others using a tenth of the machine stretch an all-core step by a tenth or more (ggml's
# threads wait for the slowest at every barrier): the figure is flagged and measured again.
# Idle desktops (a browser, a mail client) stay well under it.
QUIET_SHARE = 0.10
# With 40% of the machine taken an all-core step runs 1.7x slower or worse: a plan made from
# that predicts too little to choose well, so such a profile is not stored.
TOO_BUSY_SHARE = 0.40
GPU_BUSY_PERCENT = 10.0  # the GPU's utilisation by others just before a GPU step
GPU_TOO_BUSY_PERCENT = 40.0
BEFORE_WINDOW_S = 0.25  # /proc/stat counts 10 ms ticks: 25 ticks per CPU in the window
# Linux adds a reaped child's CPU time to its parent's; macOS and Windows report 0 there,
# so a step's own time cannot be taken out after its child ended: only the window before
# the step counts on those systems.
OWN_CHILDREN_COUNTED = sys.platform.startswith("linux")

_NOT_BUSY_FIELDS = ("idle", "iowait", "guest", "guest_nice")  # guest time is in user already


@dataclass(frozen=True)
class CpuSample:
    """The machine's CPU counters at one moment, as psutil reads them."""

    at: float  # time.monotonic()
    busy_s: tuple[float, ...]  # per logical CPU: seconds not idle since boot (steal included)
    own_s: float  # CPU seconds of this process and its descendants, reaped children included


def take_sample() -> CpuSample:
    """Read every CPU's counters and this process tree's CPU time now."""
    per_cpu = psutil.cpu_times(percpu=True)
    busy = tuple(_busy_seconds(times) for times in per_cpu)
    return CpuSample(time.monotonic(), busy, _own_cpu_seconds())


def _busy_seconds(times: Any) -> float:
    fields: dict[str, float] = times._asdict()
    return sum(value for name, value in fields.items() if name not in _NOT_BUSY_FIELDS)


def _own_cpu_seconds() -> float:
    """This process with its reaped children, plus every live descendant with theirs."""
    me = psutil.Process()
    total = _cpu_seconds(me)
    for child in me.children(recursive=True):
        try:
            total += _cpu_seconds(child)
        except psutil.Error:  # ended between the listing and the read: its time is in ours
            continue
    return total


def _cpu_seconds(process: psutil.Process) -> float:
    """On the CPU, its reaped children included (psutil's iowait is waiting, not computing)."""
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def other_share(first: CpuSample, last: CpuSample) -> float:
    """The share of all logical CPUs that processes outside this one's tree used in between."""
    wall = last.at - first.at
    if wall <= 0 or not first.busy_s:
        return 0.0
    busy = sum(b - a for a, b in zip(first.busy_s, last.busy_s, strict=True))
    others = busy - (last.own_s - first.own_s)
    return min(max(others / (wall * len(first.busy_s)), 0.0), 1.0)


class GpuUtilisation:
    """NVML's utilisation of every NVIDIA GPU, opened once; unknown (None) without a driver."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._nvml = pynvml
        except Exception as exc:  # no pynvml, no driver, no GPU: nothing to read
            log.debug("GPU utilisation unknown: %s", exc)

    def percent(self) -> float | None:
        """The busiest GPU's utilisation over NVML's last sample period, or None."""
        if self._nvml is None or not self._handles:
            return None
        try:
            rates = [self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._handles]
        except Exception as exc:  # a lost GPU, an old driver: unknown, not an error
            log.debug("NVML utilisation failed: %s", exc)
            return None
        return float(max(rates))

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception as exc:
                log.debug("nvmlShutdown failed: %s", exc)
            self._nvml = None


@dataclass(frozen=True)
class AttemptLoad:
    """Others' load around one attempt at a step."""

    before: float  # CPU share in the window just before, nothing of ours running
    during: float | None  # CPU share while the step ran; None where it cannot be told apart
    gpu_percent: float | None  # GPU utilisation just before a GPU step; None: unknown or no GPU
    seconds: float  # how long the step itself ran

    @property
    def cpu_share(self) -> float:
        return max(self.before, self.during or 0.0)

    @property
    def disturbed(self) -> bool:
        gpu_busy = self.gpu_percent is not None and self.gpu_percent >= GPU_BUSY_PERCENT
        return self.cpu_share >= QUIET_SHARE or gpu_busy


@dataclass(frozen=True)
class Watched(Generic[T]):
    """The attempt a step keeps, and what others did around it."""

    value: T
    load: StepLoad


class LoadWatch:
    """Runs each step with its load measured, repeats disturbed ones within a budget.

    A disturbed step is measured once more. `max_repeats` bounds the repeats of
    a whole run, and a repeat that is disturbed too ends them: a burst of load
    is waited out, a machine that stays busy costs one step more, not a second run.
    """

    def __init__(self, max_repeats: int, window_s: float = BEFORE_WINDOW_S) -> None:
        self.repeats_left = max_repeats
        self.steps_repeated = 0
        self._window_s = window_s
        self._gpu: GpuUtilisation | None = None
        self._kept: list[tuple[StepLoad, float]] = []

    def run(
        self,
        label: str,
        attempt: Callable[[], T],
        usable: Callable[[T], bool],
        uses_gpu: bool = False,
        again: Callable[[str], None] = lambda _label: None,
    ) -> Watched[T]:
        """Attempt the step until one is undisturbed, unusable, or no repeat is left.

        `again` hears the label before each repeat (progress); an unusable
        result (a crashed child) is not repeated for load: it would only fail again.
        """
        tries: list[tuple[T, AttemptLoad]] = []
        while True:
            tries.append(self._attempt(attempt, uses_gpu))
            value, load = tries[-1]
            if not (usable(value) and load.disturbed) or not self._spend_repeat(len(tries)):
                break
            again(label)
        value, load = min(
            tries, key=lambda t: (not usable(t[0]), t[1].cpu_share, t[1].gpu_percent or 0.0)
        )
        kept = StepLoad(label, round(load.cpu_share, 3), len(tries), load.gpu_percent)
        self._kept.append((kept, load.seconds))
        return Watched(value, kept)

    def _spend_repeat(self, attempts: int) -> bool:
        """Take one repeat from the run's budget, if another attempt may help.

        A repeat that was disturbed as well says the load is steady, not a burst:
        more repeats would only lengthen the run (a fast profile on a loaded 2-core
        machine outlasted five minutes with them), so the budget ends there.
        """
        if attempts >= 2:
            self.repeats_left = 0
        if self.repeats_left <= 0:
            return False
        self.repeats_left -= 1
        self.steps_repeated += 1
        return True

    def _attempt(self, attempt: Callable[[], T], uses_gpu: bool) -> tuple[T, AttemptLoad]:
        gpu = self._gpu_percent() if uses_gpu else None
        first = take_sample()
        time.sleep(self._window_s)  # the measuring window itself, not a wait for an event
        started = take_sample()
        value = attempt()
        ended = take_sample()
        during = other_share(started, ended) if OWN_CHILDREN_COUNTED else None
        load = AttemptLoad(other_share(first, started), during, gpu, ended.at - started.at)
        return value, load

    def _gpu_percent(self) -> float | None:
        if self._gpu is None:
            self._gpu = GpuUtilisation()
        return self._gpu.percent()

    def close(self) -> None:
        if self._gpu is not None:
            self._gpu.close()

    def verdict(self) -> MachineLoad:
        """The run's record: every kept step, and quiet, busy or too busy."""
        return machine_load(tuple(self._kept), self.steps_repeated)


def machine_load(kept: Sequence[tuple[StepLoad, float]], steps_repeated: int) -> MachineLoad:
    """Quiet when no kept step was disturbed; too busy when others took `TOO_BUSY_SHARE` of
    the CPU over the run (weighted by each step's time) or of the GPU over its steps."""
    steps = tuple(step for step, _ in kept)
    total = sum(seconds for _, seconds in kept)
    if total > 0:
        share = sum(step.other_cpu_share * seconds for step, seconds in kept) / total
    else:
        share = max((step.other_cpu_share for step in steps), default=0.0)
    busiest = max(steps, key=lambda s: s.other_cpu_share, default=None)
    gpu = [s.other_gpu_percent for s in steps if s.other_gpu_percent is not None]
    gpu_mean = sum(gpu) / len(gpu) if gpu else 0.0
    if share >= TOO_BUSY_SHARE or gpu_mean >= GPU_TOO_BUSY_PERCENT:
        verdict = Quietness.TOO_BUSY
    elif any(_step_disturbed(s) for s in steps):
        verdict = Quietness.BUSY
    else:
        verdict = Quietness.QUIET
    return MachineLoad(
        verdict=verdict,
        other_cpu_share=round(share, 3),
        busiest_step=busiest.step if busiest else "",
        busiest_share=busiest.other_cpu_share if busiest else 0.0,
        steps_repeated=steps_repeated,
        steps=steps,
    )


def _step_disturbed(step: StepLoad) -> bool:
    gpu = step.other_gpu_percent
    return step.other_cpu_share >= QUIET_SHARE or (gpu is not None and gpu >= GPU_BUSY_PERCENT)
