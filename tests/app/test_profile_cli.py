"""`shardchat profile`: measure and store, show without measuring, export/import, interruptions.

The command runs in this process (the `shardchat` fixture) except where a signal to it or to
its measurement child is what is tested: then it is a process of its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from cli_run import CliRun

from app.profiling_job import KEEP_BUSY_VARIABLE
from app.stores.profile_store import ProfileStore
from engine.llama.ggml_devices import CHILD_LABEL
from engine.machine.hardware import llama_build_id, probe_hardware
from engine.machine.profile import Profile, StepLoad
from engine.profiling.machine_load import machine_load
from tests.terminal_signals import ctrl_c_as_a_terminal_gives_it

pytestmark = pytest.mark.serial  # it measures this machine: see the marker

SHARDCHAT = str(Path(sys.executable).parent / "shardchat")
DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(autouse=True)
def keep_busy_profiles(monkeypatch) -> None:
    """These runs must be stored even while others' tests load the box (shardchat inherits it)."""
    monkeypatch.setenv(KEEP_BUSY_VARIABLE, "1")


def stored_profiles() -> list:
    with ProfileStore() as store:
        return store.list()


@pytest.fixture
def earlier_profile(recorded_profile_here: Profile) -> Profile:
    """A complete profile of this machine already in the store, as a finished earlier run
    leaves it (saved, not measured again: the smoke run's own test measures one)."""
    earlier = replace(recorded_profile_here, llama_build=llama_build_id())
    with ProfileStore() as store:
        store.save(earlier)
    return earlier


def test_smoke_profile_is_stored_and_shown_without_measuring(shardchat: CliRun) -> None:
    done = shardchat("profile", "--smoke")
    assert done.returncode == 0, done.stderr
    assert "GFLOP/s" in done.stdout and "DRAM read" in done.stdout and "stored in" in done.stdout
    [summary] = stored_profiles()
    assert summary.mode == "smoke" and summary.size_bytes < 200 * 1024
    shown = shardchat("profile", "--show", "--json")
    assert shown.returncode == 0, shown.stderr
    assert (
        json.loads(shown.stdout)["created_at"]
        == json.loads(shardchat("profile", "--show", "--json").stdout)["created_at"]
    )
    assert len(stored_profiles()) == 1  # showing measured nothing new


def test_show_without_a_profile_is_bad_input(shardchat: CliRun) -> None:
    done = shardchat("profile", "--show")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no profile is stored" in done.stderr


def test_a_profile_of_another_machine_imports_and_exports(
    tmp_path: Path, shardchat: CliRun, recorded_profile_file
) -> None:
    recorded = recorded_profile_file
    done = shardchat("profile", "--import", str(recorded))
    assert done.returncode == 0, done.stderr
    assert "imported" in done.stdout
    [summary] = stored_profiles()
    assert summary.fingerprint == json.loads(recorded.read_text())["fingerprint"]


def test_show_flags_a_profile_measured_on_a_busy_machine(
    shardchat: CliRun, recorded_profile
) -> None:
    recorded = recorded_profile
    hardware = probe_hardware()
    steps = (StepLoad("fixed costs", 0.05, 1), StepLoad("dense Q4_0", 0.62, 3))
    load = machine_load([(steps[0], 4.0), (steps[1], 2.0)], steps_repeated=2)
    busy = replace(
        recorded, fingerprint=hardware.fingerprint(), llama_build=hardware.llama_build,
        machine_load=load,
    )  # fmt: skip
    with ProfileStore() as store:
        store.save(busy)
    done = shardchat("profile", "--show")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("machine load")]
    assert "busy: other programs used 24% of the processor; 2 steps measured again" in line
    assert "62% during dense Q4_0" in line and "profile again when the machine is quiet" in line


def test_export_writes_the_stored_profile(
    tmp_path: Path, shardchat: CliRun, earlier_profile: Profile
) -> None:
    target = tmp_path / "mine.json"
    done = shardchat("profile", "--export", str(target))
    assert done.returncode == 0, done.stderr
    exported = json.loads(target.read_text())
    assert exported["fingerprint"] == probe_hardware().fingerprint()
    assert Profile.from_json(target.read_text()) == earlier_profile


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"mode": "fast"}'])
def test_importing_a_bad_file_exits_2_with_one_line(
    tmp_path: Path, content: str, shardchat: CliRun
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    done = shardchat("profile", "--import", str(bad))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and str(bad) in done.stderr
    assert "Traceback" not in done.stderr


def start_profiling() -> tuple[subprocess.Popen, psutil.Process]:
    """Start `profile --smoke` and return it with the first measurement child it spawns
    (not the hardware probe's child, which lists ggml's devices)."""
    with ctrl_c_as_a_terminal_gives_it():
        process = subprocess.Popen(
            [SHARDCHAT, "profile", "--smoke"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for child in psutil.Process(process.pid).children(recursive=True):
            try:
                command = " ".join(child.cmdline())
                if "engine.child_process" in command and CHILD_LABEL not in command:
                    return process, child
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.01)
    process.kill()
    raise AssertionError("no measurement child appeared")


def test_a_killed_measurement_child_is_recorded_and_the_run_completes(
    earlier_profile: Profile,
) -> None:
    process, child = start_profiling()
    child.send_signal(signal.SIGKILL)
    out, err = process.communicate(timeout=180)
    assert process.returncode == 0, err
    assert "signal 9" in out
    assert len(stored_profiles()) == 2  # the earlier complete profile is still there
    with ProfileStore() as store:
        latest = store.latest(probe_hardware().fingerprint())
    assert [u.reason.split(":")[0] for u in latest.unusable] == ["crashed (signal 9, SIGKILL)"]


def test_ctrl_c_leaves_the_previous_complete_profile_and_no_child_behind(
    earlier_profile: Profile,
) -> None:
    [before] = stored_profiles()
    process, child = start_profiling()
    os.kill(process.pid, signal.SIGINT)
    process.communicate(timeout=60)
    assert process.returncode == 130
    assert stored_profiles() == [before]
    child.wait(timeout=10)  # killed by the interrupted parent, not orphaned
    assert not child.is_running()
