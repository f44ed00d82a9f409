"""A profiling job on its own thread: a real smoke run to the store, cancels, failures."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from app.profiling_job import (
    KEEP_BUSY_VARIABLE,
    ProfilingCancelled,
    ProfilingFailed,
    ProfilingJob,
    ProfilingSaved,
    needs_profiling,
    too_busy_message,
)
from app.stores.profile_store import ProfileStore
from engine.machine.hardware import probe_hardware
from engine.machine.profile import ProfileMode, Quietness
from engine.profiling.machine_load import QUIET_SHARE, LoadWatch
from engine.profiling.profiler import AGAIN_SUFFIX, plan_for
from tests.engine.competing_load import competing_load

pytestmark = pytest.mark.serial  # it measures this machine: see the marker

RUN_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def hardware():
    return probe_hardware()


class Recorder:
    """Collects a job's events and lets the test wait for one of them."""

    def __init__(self) -> None:
        self.events: list[object] = []
        self._arrived = threading.Condition()

    def __call__(self, event: object) -> None:
        with self._arrived:
            self.events.append(event)
            self._arrived.notify_all()

    def wait_for(self, accept, timeout: float = RUN_TIMEOUT_S) -> object:
        with self._arrived:
            found = self._arrived.wait_for(
                lambda: next((e for e in self.events if accept(e)), None), timeout
            )
        assert found is not None, f"no matching event in {self.events}"
        return found


def stored(hardware) -> object:
    with ProfileStore() as store:
        return store.latest(hardware.fingerprint(), hardware.llama_build)


def profiling_children() -> list[psutil.Process]:
    children = psutil.Process().children(recursive=True)
    return [c for c in children if "engine.child_process" in " ".join(_cmdline(c))]


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def test_a_smoke_run_reports_progress_and_is_saved_with_the_load_it_met(
    hardware, monkeypatch
) -> None:
    """Issue 29: a busy loop on every core during the first step is noticed, that step is
    measured again, and the stored profile says the machine was busy."""
    monkeypatch.setenv(KEEP_BUSY_VARIABLE, "1")  # stored even if others' tests load the box
    assert needs_profiling(hardware)
    recorder = Recorder()
    with competing_load() as loops:

        def first_step_under_load(event: object) -> None:
            if getattr(event, "step", 0) >= 1 and loops:  # the first step is done
                for loop in loops:
                    loop.kill()
                loops.clear()
            recorder(event)

        job = ProfilingJob(first_step_under_load, ProfileMode.SMOKE, hardware=hardware).start()
        assert job.wait(RUN_TIMEOUT_S)
    *progress, outcome = recorder.events
    assert isinstance(outcome, ProfilingSaved), outcome
    assert job.outcome == outcome and not job.is_running
    assert [p.step for p in progress] == sorted(p.step for p in progress)
    assert progress[0].step == 0 and progress[-1].label == "done"
    assert progress[1].label == f"fixed costs {AGAIN_SUFFIX}" and progress[1].step == 0
    assert outcome.profile.mode is ProfileMode.SMOKE
    assert outcome.saved.fingerprint == hardware.fingerprint()
    assert stored(hardware) == outcome.profile
    assert not needs_profiling(hardware)

    load = outcome.profile.machine_load
    assert load is not None and load.verdict is not Quietness.QUIET
    first = load.steps[0]
    assert first.step == "fixed costs" and first.attempts == 2
    assert first.other_cpu_share >= QUIET_SHARE
    assert load.steps_repeated == 1 == plan_for(ProfileMode.SMOKE, 1).disturbed_repeats
    assert [s.attempts for s in load.steps[1:]] == [1] * (len(load.steps) - 1)


def test_cancel_mid_run_kills_the_child_and_stores_nothing(hardware) -> None:
    recorder = Recorder()
    job = ProfilingJob(recorder, ProfileMode.SMOKE, hardware=hardware).start()
    recorder.wait_for(lambda e: getattr(e, "step", 0) >= 1)
    time.sleep(0.3)  # let the second step's child process get going
    assert profiling_children(), "expected a measuring child process"
    asked = time.monotonic()
    job.cancel()
    assert job.wait(5)
    assert time.monotonic() - asked < 2.0
    assert isinstance(recorder.events[-1], ProfilingCancelled)
    assert not any(isinstance(e, ProfilingSaved) for e in recorder.events)
    assert profiling_children() == []
    assert stored(hardware) is None and needs_profiling(hardware)


def test_cancel_before_the_first_step_still_reports_once(hardware) -> None:
    """A listener that raises does not stop the job from ending and recording its outcome."""
    calls: list[object] = []

    def broken_listener(event: object) -> None:
        calls.append(event)
        raise RuntimeError("listener bug")

    job = ProfilingJob(broken_listener, ProfileMode.SMOKE, hardware=hardware)
    job.cancel()
    job.start()
    assert job.wait(10)
    assert isinstance(job.outcome, ProfilingCancelled)
    assert calls == [job.outcome]
    assert stored(hardware) is None


def test_a_store_that_cannot_be_written_fails_with_one_line(
    hardware, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv(KEEP_BUSY_VARIABLE, "1")  # the store is reached however busy the box
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the store's folder should be")
    recorder = Recorder()
    job = ProfilingJob(
        recorder, ProfileMode.SMOKE, hardware=hardware, store_path=blocker / "profiles.sqlite3"
    ).start()
    assert job.wait(RUN_TIMEOUT_S)
    outcome = recorder.events[-1]
    assert isinstance(outcome, ProfilingFailed)
    assert "not-a-folder" in outcome.message and "\n" not in outcome.message
    assert recorder.events == [outcome]  # it failed before measuring anything
    assert stored(hardware) is None


def test_a_job_that_never_started_counts_as_ended() -> None:
    job = ProfilingJob(lambda _event: None, ProfileMode.SMOKE)
    assert job.wait(0) and not job.is_running and job.outcome is None


def test_a_profile_measured_beside_a_busy_loop_on_every_core_is_refused_in_one_line(
    monkeypatch,
    recorded_profile,
) -> None:
    """The job and `shardchat profile` store nothing when this says why (issue 29)."""
    monkeypatch.delenv(KEEP_BUSY_VARIABLE, raising=False)
    watch = LoadWatch(max_repeats=0)
    with competing_load():
        watch.run("dense Q4_0", lambda: sum(range(100_000)), lambda _value: True)
    measured = replace(recorded_profile, machine_load=watch.verdict())
    message = too_busy_message(measured)
    assert message is not None and "\n" not in message
    assert "too busy" in message and "not stored" in message and "dense Q4_0" in message
    assert too_busy_message(replace(measured, machine_load=None)) is None  # stored before
    monkeypatch.setenv(KEEP_BUSY_VARIABLE, "1")
    assert too_busy_message(measured) is None
