"""The first-launch wizard, driven page by page with real profiling runs and real files."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QDialog, QWizard

from app.profiling_job import KEEP_BUSY_VARIABLE, ProfilingSaved, ProfilingTooBusy
from app.stores.profile_store import ProfileStore
from engine.machine.hardware import probe_hardware
from engine.machine.profile import Profile, ProfileMode, Quietness, StepLoad
from engine.model.default_model import default_model_path
from engine.model.inventory import ModelInventory, read_inventory
from engine.profiling.machine_load import machine_load
from ui.profiling.profile_wizard import (
    DONE_PAGE,
    HARDWARE_PAGE,
    MODEL_PAGE,
    PROFILING_PAGE,
    RESULTS_PAGE,
    WELCOME_PAGE,
    ModelPage,
    ProfileWizard,
)
from ui.profiling.profiling_page import ProfilingPage

pytestmark = pytest.mark.serial  # it measures this machine: see the marker

RUN_TIMEOUT_MS = 600_000  # a fast profile: 45 s alone, 280 s with others loading the box
NEXT = QWizard.WizardButton.NextButton
# an estimate from the steps measured: seconds, minutes, or a step outlasting it
TIME_LEFT = re.compile(r"\d+ s left|\d+ min left|seconds left|longer than estimated")


@pytest.fixture(scope="module")
def hardware():
    return probe_hardware()


@pytest.fixture(autouse=True)
def keep_busy_profiles(monkeypatch) -> None:
    """The real runs here must be stored even while others' tests load the box."""
    monkeypatch.setenv(KEEP_BUSY_VARIABLE, "1")


def stored(hardware):
    with ProfileStore() as store:
        return store.latest(hardware.fingerprint(), hardware.llama_build)


def profiling_children() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "engine.child_process" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def open_wizard(qtbot, hardware, mode: ProfileMode) -> ProfileWizard:
    wizard = ProfileWizard(hardware, mode)
    qtbot.addWidget(wizard)
    wizard.show()
    return wizard


def go_to_profiling(wizard: ProfileWizard) -> None:
    wizard.next()
    wizard.next()
    assert wizard.currentId() == PROFILING_PAGE


def test_a_fast_profile_runs_through_every_page(qtbot, hardware) -> None:
    wizard = open_wizard(qtbot, hardware, ProfileMode.FAST)
    assert wizard.currentId() == WELCOME_PAGE and wizard.profile() is None
    wizard.next()
    assert wizard.currentId() == HARDWARE_PAGE
    found = wizard.hardware_page.facts.values
    assert hardware.cpu.model in found["CPU"].text()
    assert found["GPU"].text().startswith("no GPU found")

    ticks: list[float] = []
    timer = QTimer()
    timer.setInterval(20)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start()
    started = time.perf_counter()
    wizard.next()
    page = wizard.profiling_page
    assert wizard.currentId() == PROFILING_PAGE and page.is_running
    assert not wizard.button(NEXT).isEnabled()
    qtbot.waitUntil(lambda: bool(TIME_LEFT.search(page.time_label.text())), timeout=RUN_TIMEOUT_MS)
    assert "step" in page.step_label.text() and page.bar.value() >= 1
    qtbot.waitUntil(lambda: wizard.profile() is not None, timeout=RUN_TIMEOUT_MS)
    elapsed = time.perf_counter() - started
    timer.stop()
    assert len(ticks) >= elapsed / 0.1, f"{len(ticks)} ticks in {elapsed:.1f} s"
    assert max(b - a for a, b in zip(ticks, ticks[1:], strict=False)) < 2.0  # no freeze

    profile = wizard.profile()
    assert profile.mode is ProfileMode.FAST and stored(hardware) == profile
    assert page.bar.value() == page.bar.maximum() > 1
    assert page.job.wait(5) and not page.is_running
    assert wizard.button(NEXT).isEnabled()

    wizard.next()
    assert wizard.currentId() == RESULTS_PAGE
    results = wizard.results_page.facts.values
    assert hardware.cpu.model in results["CPU"].text()
    assert f"{profile.dram_read_gbps:.1f} GB/s" in results["DRAM read"].text()
    assert results["GPU"].text().startswith("no GPU found")
    assert results["Suggested VRAM budget"].text().startswith("0 B")
    assert "CPU plan" in results["Suggested VRAM budget"].text()
    threads = ", ".join(map(str, profile.thread_counts))
    assert f"measured {threads}" in results["Threads"].text()

    wizard.next()
    assert wizard.currentId() == MODEL_PAGE
    assert wizard.model_page.default_choice.isChecked()
    assert wizard.chosen_model() == str(default_model_path())
    wizard.next()
    assert wizard.currentId() == DONE_PAGE
    assert "A fast profile of this machine is stored" in wizard.done_page.summary.text()
    wizard.button(QWizard.WizardButton.FinishButton).click()
    assert wizard.result() == QDialog.DialogCode.Accepted


def test_cancel_during_profiling_stores_nothing_and_allows_a_retry(qtbot, hardware) -> None:
    wizard = open_wizard(qtbot, hardware, ProfileMode.SMOKE)
    go_to_profiling(wizard)
    page = wizard.profiling_page
    qtbot.waitUntil(lambda: page.bar.value() >= 1, timeout=RUN_TIMEOUT_MS)
    qtbot.waitUntil(lambda: bool(profiling_children()), timeout=RUN_TIMEOUT_MS)
    first_job = page.job
    page.cancel_button.click()
    assert first_job.wait(5) and not page.is_running
    qtbot.waitUntil(page.retry_button.isVisible, timeout=5_000)
    assert "nothing was stored" in page.status_label.text()
    assert profiling_children() == []
    assert stored(hardware) is None and wizard.profile() is None
    assert not wizard.button(NEXT).isEnabled()

    page.retry_button.click()
    assert page.job is not first_job and page.is_running
    qtbot.waitUntil(lambda: wizard.profile() is not None, timeout=RUN_TIMEOUT_MS)
    assert stored(hardware) == wizard.profile()
    assert wizard.button(NEXT).isEnabled() and not page.retry_button.isVisible()


def test_closing_the_wizard_mid_run_cancels_the_job(qtbot, hardware) -> None:
    wizard = open_wizard(qtbot, hardware, ProfileMode.SMOKE)
    go_to_profiling(wizard)
    page = wizard.profiling_page
    qtbot.waitUntil(lambda: page.bar.value() >= 1, timeout=RUN_TIMEOUT_MS)
    asked = time.monotonic()
    wizard.close()
    assert time.monotonic() - asked < 3.0
    assert not page.is_running and page.job.wait(0)
    assert wizard.result() == QDialog.DialogCode.Rejected
    assert profiling_children() == [] and stored(hardware) is None


def test_back_mid_run_cancels_and_next_starts_afresh(qtbot, hardware) -> None:
    """The first run's late "cancelled" report must not end the second run's page."""
    wizard = open_wizard(qtbot, hardware, ProfileMode.SMOKE)
    go_to_profiling(wizard)
    page = wizard.profiling_page
    qtbot.waitUntil(lambda: page.bar.value() >= 1, timeout=RUN_TIMEOUT_MS)
    first_job = page.job
    wizard.back()
    assert wizard.currentId() == HARDWARE_PAGE and not first_job.is_running
    wizard.next()
    assert page.job is not first_job and page.is_running
    qtbot.wait(300)  # the first job's queued report arrives now
    assert page.cancel_button.isEnabled() and not page.retry_button.isVisible()
    qtbot.waitUntil(lambda: wizard.profile() is not None, timeout=RUN_TIMEOUT_MS)
    assert stored(hardware) == wizard.profile()


def measured_with_load(recorded: Profile, hardware, heavy_share: float) -> Profile:
    """The recorded 2-core profile as if measured here, its DRAM step beside other programs."""
    steps = (StepLoad("dense Q4_0", 0.03, 1), StepLoad("dram bandwidth", heavy_share, 3))
    load = machine_load([(steps[0], 6.0), (steps[1], 4.0)], steps_repeated=2)
    return replace(recorded, fingerprint=hardware.fingerprint(), machine_load=load)


def test_a_busy_profile_is_flagged_with_an_offer_to_measure_again(
    qtbot, hardware, recorded_profile
) -> None:
    busy = measured_with_load(recorded_profile, hardware, 0.5)  # 22% of the run: busy, usable
    with ProfileStore() as store:
        saved = store.save(busy)
    wizard = open_wizard(qtbot, hardware, ProfileMode.FAST)
    page = wizard.profiling_page
    page.show_outcome(ProfilingSaved(busy, saved))  # as if the run had just ended
    go_to_profiling(wizard)
    assert page.job is None and wizard.button(NEXT).isEnabled()  # nothing measured again
    assert page.load_label.isVisible()
    assert "busy: other programs used 22% of the processor" in page.load_label.text()
    assert "50% during dram bandwidth" in page.load_label.text()
    assert "measure again later" in page.status_label.text()
    assert page.retry_button.isVisible() and page.retry_button.isEnabled()
    wizard.next()
    row = wizard.results_page.facts.values["Machine while measured"].text()
    assert row.startswith("busy:") and "profile again when the machine is quiet" in row
    wizard.next()
    wizard.next()
    assert wizard.currentId() == DONE_PAGE
    summary = wizard.done_page.summary.text()
    assert "A fast profile of this machine is stored. It was measured while other programs" in (
        summary
    )


def test_a_too_busy_run_is_shown_but_not_taken(qtbot, hardware, recorded_profile) -> None:
    page = ProfilingPage(ProfileMode.FAST, hardware, None)
    qtbot.addWidget(page)
    page.show()
    too_busy = measured_with_load(recorded_profile, hardware, 1.0)  # 42% of the run
    assert too_busy.machine_load is not None
    assert too_busy.machine_load.verdict is Quietness.TOO_BUSY
    page.show_outcome(ProfilingTooBusy(too_busy, "the machine was too busy to measure"))
    assert page.profile is None and not page.isComplete()
    assert page.step_label.text() == "Too busy to measure"
    assert page.load_label.text().startswith(
        "Machine while measured: too busy: other programs used 42% of the processor"
    )
    assert "not stored" in page.status_label.text()
    assert "measure again later" in page.status_label.text()
    assert page.retry_button.isVisible()
    assert stored(hardware) is None


def check_import(qtbot, page: ModelPage, path: Path) -> bool:
    """Import the file on the page and wait for its check (made on the page's worker)."""
    with qtbot.waitSignal(page.checked, timeout=RUN_TIMEOUT_MS) as checked:
        page.import_model(str(path))
        assert page.reason_label.text() == f"Reading {path.name}…"
        assert not page.import_button.isEnabled() and not page.isComplete()
    assert page.import_button.isEnabled() and page.isComplete()
    return bool(checked.args[0])


def test_the_model_page_refuses_bad_files_and_keeps_the_default(
    qtbot, hardware, tmp_path: Path, make_synthetic, write_projector
) -> None:
    wizard = open_wizard(qtbot, hardware, ProfileMode.SMOKE)
    page = wizard.model_page
    default = str(default_model_path())
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("these are my notes, not a model")
    assert not check_import(qtbot, page, not_gguf)
    assert "not a GGUF file" in page.reason_label.text()
    assert "\n" not in page.reason_label.text()
    assert page.default_choice.isChecked() and not page.imported_choice.isVisibleTo(wizard)
    assert wizard.chosen_model() == default

    assert not check_import(qtbot, page, write_projector(tmp_path / "mmproj.gguf"))
    assert "vision projector" in page.reason_label.text()
    assert wizard.chosen_model() == default

    model = make_synthetic("llama", "Q8_0")
    assert check_import(qtbot, page, model)
    assert page.reason_label.text() == "" and page.imported_choice.isChecked()
    assert wizard.chosen_model() == str(model)
    page.default_choice.setChecked(True)
    assert wizard.chosen_model() == default


def test_the_model_page_reads_an_imported_file_off_the_gui_thread(qtbot) -> None:
    threads: list[threading.Thread] = []

    def recording_reader(path: str) -> ModelInventory:
        threads.append(threading.current_thread())
        return read_inventory(path)

    page = ModelPage(read_inventory=recording_reader)
    qtbot.addWidget(page)
    model = default_model_path()
    assert check_import(qtbot, page, model)
    assert page.chosen_model() == str(model) and page.imported_choice.isChecked()
    assert len(threads) == 1 and threads[0] is not threading.current_thread()
