"""The wizard's measuring page: a profiling job on its own thread, its progress as it comes.

The job's reports reach the page through a relay (ui.thread_bridge), so it updates on
the GUI thread and the window stays responsive for the minutes a fast profile
takes. Cancelling, going back, or closing the wizard stops the job and
stores nothing. A run that other programs disturbed is flagged with an offer
to measure again; one too disturbed to trust was not stored, and the page
says so instead of going on.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWizardPage,
)

from app.profiling_job import (
    ProfilingCancelled,
    ProfilingEvent,
    ProfilingFailed,
    ProfilingJob,
    ProfilingOutcome,
    ProfilingSaved,
    ProfilingTooBusy,
)
from app.screen_text.profile_summary import machine_load_text, time_left_text
from app.screen_text.units import format_duration
from engine.machine.hardware_info import HardwareInfo
from engine.machine.profile import Profile, ProfileMode, Quietness
from ui.thread_bridge import GuiRelay

if TYPE_CHECKING:  # engine.profiling.profiler loads llama.cpp; only its type is needed here
    from engine.profiling.profiler import ProfileProgress

log = logging.getLogger(__name__)

STOP_WAIT_S = 5.0  # a cancel kills the child at its next 50 ms poll; this is ample
CLOCK_INTERVAL_MS = 250


class ProfilingPage(QWizardPage):
    """Runs the job: progress, current step, elapsed and ETA; cancel, retry."""

    def __init__(self, mode: ProfileMode, hardware: HardwareInfo, store_path: Path | None) -> None:
        super().__init__()
        self.setTitle("Measuring this machine")
        self.setSubTitle(
            f"A {mode.value} profile. The window stays usable; you can cancel at any time."
        )
        self.profile: Profile | None = None
        self.job: ProfilingJob | None = None
        self._mode, self._hardware, self._store_path = mode, hardware, store_path
        self._reports: GuiRelay | None = None  # the current job's; an earlier one's is closed
        self._started_at = 0.0
        self._eta: tuple[float, float] | None = None  # (seconds left, when that was said)
        self._build_widgets()
        self._clock = QTimer(self)
        self._clock.setInterval(CLOCK_INTERVAL_MS)
        self._clock.timeout.connect(self._show_time)

    def _build_widgets(self) -> None:
        self.bar = QProgressBar()
        self.bar.setAccessibleName("Profiling progress")
        self.step_label = QLabel("Not started")
        self.step_label.setAccessibleName("Current step")
        self.time_label = QLabel()
        self.time_label.setAccessibleName("Elapsed and time left")
        self.status_label = QLabel()
        self.status_label.setWordWrap(True)
        self.status_label.setAccessibleName("Profiling status")
        self.load_label = QLabel()  # shown when other programs disturbed the run
        self.load_label.setWordWrap(True)
        self.load_label.setAccessibleName("Machine load while measured")
        self.load_label.hide()
        self.cancel_button = QPushButton("Cancel profiling")
        self.cancel_button.setAccessibleName("Cancel profiling")
        self.cancel_button.clicked.connect(self.cancel)
        self.retry_button = QPushButton("Profile again")
        self.retry_button.setAccessibleName("Profile again")
        self.retry_button.clicked.connect(self.start)
        self.retry_button.hide()
        buttons = QHBoxLayout()
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.retry_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        shown = (self.bar, self.step_label, self.time_label, self.load_label, self.status_label)
        for widget in shown:
            layout.addWidget(widget)
        layout.addLayout(buttons)
        layout.addStretch(1)

    # -- QWizardPage ------------------------------------------------------------------------

    def initializePage(self) -> None:
        if self.profile is None and not self.is_running:
            self.start()

    def cleanupPage(self) -> None:
        """Back to the hardware page: a run in progress is cancelled, not left behind."""
        self.stop_job()

    def isComplete(self) -> bool:
        return self.profile is not None

    # -- the job ----------------------------------------------------------------------------

    @property
    def is_running(self) -> bool:
        return self.job is not None and self.job.is_running

    def start(self) -> None:
        """Start a fresh job; events of an earlier one that are still queued are ignored."""
        if self._reports is not None:
            self._reports.close()
        reports = self._reports = GuiRelay(self)

        def report(event: ProfilingEvent) -> None:  # on the job's thread
            reports.post(self._on_event, event)

        self.job = ProfilingJob(report, self._mode, self._hardware, self._store_path)
        self._started_at, self._eta = time.monotonic(), None
        self.bar.setRange(0, 0)  # busy until the first step reports
        self.step_label.setText("Starting…")
        self.status_label.clear()
        self.load_label.hide()
        self.profile = None  # a new run replaces a busy one only if it is stored
        self.completeChanged.emit()
        self.cancel_button.setEnabled(True)
        self.retry_button.hide()
        self.job.start()
        self._clock.start()
        self._show_time()

    def cancel(self) -> None:
        if self.job is not None and self.job.is_running:  # is_running, narrowed for the checker
            self.job.cancel()
            self.cancel_button.setEnabled(False)
            self.step_label.setText("Cancelling…")

    def stop_job(self) -> None:
        """Cancel and wait for the thread to end; the child process dies with the cancel."""
        if self.job is None:
            return
        self.cancel()
        if not self.job.wait(STOP_WAIT_S):
            log.warning("the profiling thread did not end within %.0f s", STOP_WAIT_S)

    def _on_event(self, event: ProfilingEvent) -> None:
        """The current job's report, on the GUI thread: its progress, or how it ended."""
        if isinstance(
            event, ProfilingSaved | ProfilingTooBusy | ProfilingCancelled | ProfilingFailed
        ):
            self.show_outcome(event)
        else:
            self._show_progress(event)

    def show_outcome(self, outcome: ProfilingOutcome) -> None:
        """Render how a run ended: stored (flagged if the machine was busy), refused as too
        busy, cancelled or failed. The job's reports come here; so can a recorded outcome."""
        self._finish_run()
        if isinstance(outcome, ProfilingSaved):
            self._show_saved(outcome)
        elif isinstance(outcome, ProfilingTooBusy):
            self._show_too_busy(outcome)
        elif isinstance(outcome, ProfilingCancelled):
            self._show_cancelled()
        else:
            self._show_failed(outcome.message)

    # -- rendering --------------------------------------------------------------------------

    def _show_progress(self, progress: ProfileProgress) -> None:
        self.bar.setRange(0, progress.total)
        self.bar.setValue(progress.step)
        if progress.step < progress.total:
            shown = f"Measuring {progress.label} (step {progress.step + 1} of {progress.total})"
            self.step_label.setText(shown)
        self._eta = (progress.eta_s, time.monotonic()) if progress.eta_s is not None else None
        self._show_time()

    def _show_time(self) -> None:
        now = time.monotonic()
        left = None if self._eta is None else self._eta[0] - (now - self._eta[1])
        elapsed = format_duration(now - self._started_at)
        self.time_label.setText(f"{elapsed} elapsed, {time_left_text(left)}")

    def _show_saved(self, outcome: ProfilingSaved) -> None:
        self.profile = outcome.profile
        self.bar.setValue(self.bar.maximum())
        self.step_label.setText(f"Done: all {self.bar.maximum()} steps measured")
        took = format_duration(outcome.profile.duration_s)
        self.time_label.setText(f"took {took}")
        load = outcome.profile.machine_load
        if load is not None and load.verdict is Quietness.BUSY:
            self._show_load_flag(outcome.profile, stored=True)
        else:
            self.status_label.setText("The profile is stored. Press Next to see the figures.")
        self.completeChanged.emit()

    def _show_too_busy(self, outcome: ProfilingTooBusy) -> None:
        self.step_label.setText("Too busy to measure")
        self.time_label.setText(f"took {format_duration(outcome.profile.duration_s)}")
        self._show_load_flag(outcome.profile, stored=False)

    def _show_load_flag(self, profile: Profile, stored: bool) -> None:
        """Say how busy the machine was and offer to measure again (now, or later from the menu)."""
        self.load_label.setText(f"Machine while measured: {machine_load_text(profile)}")
        self.load_label.show()
        kept = (
            "The profile is stored, flagged as measured on a busy machine; plans made from it "
            "may predict less than the model reaches. Press Next to use it"
            if stored
            else "The profile was not stored: its figures would make poor plans. Skip"
        )
        self.status_label.setText(
            f"{kept}, and measure again later from Tools → Profile this machine… once "
            "other programs are closed, or profile again now."
        )
        self.retry_button.show()

    def _show_cancelled(self) -> None:
        self.step_label.setText("Cancelled")
        self.status_label.setText(
            "Profiling was cancelled and nothing was stored. Profile again, or Skip and run "
            "it later from the menu."
        )
        self.retry_button.show()

    def _show_failed(self, message: str) -> None:
        self.step_label.setText("Failed")
        self.status_label.setText(f"{message}\nProfile again, or Skip and run it later.")
        self.retry_button.show()

    def _finish_run(self) -> None:
        self._clock.stop()
        self.cancel_button.setEnabled(False)
        if self.bar.maximum() == 0:
            self.bar.setRange(0, 1)
