"""A profiling run as an operation object: its own thread, progress, cancel, save on success.

The wizard (and the menu's "Profile this machine again") must not block the
GUI thread for the minutes a fast profile takes, and must not borrow the
engine worker's thread either, which stays free to chat. So a job owns one
short-lived thread: it runs the `Profiler` (whose steps are child processes
that a cancel kills), stores the finished profile, and reports everything
through one callback, as the engine worker does with its events.

Exactly one outcome is reported: `ProfilingSaved`, `ProfilingTooBusy` (measured
while other programs took too much of the machine: shown, not stored),
`ProfilingCancelled` or `ProfilingFailed`. A cancel that arrives before the profile is committed
wins, so "cancelled" always means nothing was stored.

`engine.profiling.profiler` loads llama.cpp, so it is imported when a job runs, not
when this module is imported: the Qt layer imports this module and must not
pull llama.cpp in at import time.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Union

from app.machine_profile import this_machine_profile
from app.stores.profile_store import ProfileSaved, ProfileStore
from engine.cancel import CancelToken
from engine.child_process import Cancelled
from engine.errors import ShardChatError
from engine.machine.hardware import probe_hardware
from engine.machine.hardware_info import HardwareInfo
from engine.machine.profile import Profile, ProfileMode

if TYPE_CHECKING:
    from engine.profiling.profiler import ProfileProgress

log = logging.getLogger(__name__)

KEEP_BUSY_VARIABLE = "SHARDCHAT_PROFILE_KEEP_BUSY"


@dataclass(frozen=True)
class ProfilingSaved:
    """The run finished and its profile is in the store."""

    profile: Profile
    saved: ProfileSaved


@dataclass(frozen=True)
class ProfilingTooBusy:
    """The run finished, but other programs disturbed it too much: nothing was stored.

    `profile` is what was measured, for showing how busy the machine was;
    `message` is one line for the user.
    """

    profile: Profile
    message: str


@dataclass(frozen=True)
class ProfilingCancelled:
    """The run was cancelled; its child process is dead and nothing was stored."""


@dataclass(frozen=True)
class ProfilingFailed:
    """The run could not produce a profile; `message` is one line for the user."""

    message: str


ProfilingOutcome = ProfilingSaved | ProfilingTooBusy | ProfilingCancelled | ProfilingFailed
ProfilingEvent = Union["ProfileProgress", ProfilingOutcome]  # progress, then one outcome
ProfilingCallback = Callable[[ProfilingEvent], None]


def too_busy_message(profile: Profile) -> str | None:
    """Why a profile must not be stored as the machine's, in one line; None if it may be.

    Other programs that took `TOO_BUSY_SHARE` (engine.profiling.machine_load) of the
    machine while it was measured make every figure too slow to plan with (issue 29).
    Test suites and benchmarks on shared machines set SHARDCHAT_PROFILE_KEEP_BUSY=1 to
    store it, flagged, anyway.
    """
    load = profile.machine_load
    if load is None or load.trustworthy or os.environ.get(KEEP_BUSY_VARIABLE) == "1":
        return None
    return (
        f"the machine was too busy to measure: other programs used "
        f"{100 * load.other_cpu_share:.0f}% of the processor (the most during "
        f"{load.busiest_step}), so the profile was not stored; close them and profile again"
    )


def needs_profiling(hardware: HardwareInfo | None = None, store_path: Path | None = None) -> bool:
    """True when no profile is stored for this machine's fingerprint and llama.cpp build."""
    hardware = hardware or probe_hardware()
    with ProfileStore(store_path) as store:
        return this_machine_profile(hardware, store) is None


class ProfilingJob:
    """One profiling run on its own thread; `report` is called on that thread."""

    def __init__(
        self,
        report: ProfilingCallback,
        mode: ProfileMode = ProfileMode.FAST,
        hardware: HardwareInfo | None = None,
        store_path: Path | None = None,
    ) -> None:
        self.mode = mode
        self.outcome: ProfilingOutcome | None = None
        self._report = report
        self._hardware = hardware
        self._store_path = store_path
        self._cancel = CancelToken()
        self._commit_lock = threading.Lock()
        self._committed = False
        self._thread = threading.Thread(target=self._run, name="shardchat-profiling", daemon=True)

    @property
    def is_running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> ProfilingJob:
        """Start the run; a job runs once (make a new one to try again)."""
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Stop the run if its profile is not committed yet; returns at once."""
        with self._commit_lock:
            if not self._committed:
                self._cancel.cancel()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; True if it has (or never started)."""
        if self._thread.ident is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        self.outcome = self._outcome()
        self._emit(self.outcome)

    def _outcome(self) -> ProfilingOutcome:
        try:
            # opened first: a store that cannot be opened fails now, not after the measuring
            with ProfileStore(self._store_path) as store:
                profile = self._measure()
                if not self._commit():
                    return ProfilingCancelled()
                refused = too_busy_message(profile)
                if refused is not None:
                    return ProfilingTooBusy(profile, refused)
                return ProfilingSaved(profile, store.save(profile))
        except Cancelled:
            return ProfilingCancelled()
        except ShardChatError as exc:
            return ProfilingFailed(_one_line(str(exc)))
        except Exception as exc:  # a bug, but the wizard must hear about it, not hang
            log.exception("profiling failed")
            return ProfilingFailed(_one_line(f"profiling failed: {type(exc).__name__}: {exc}"))

    def _measure(self) -> Profile:
        from engine.profiling.profiler import Profiler  # loads llama.cpp; see the module docstring

        hardware = self._hardware or probe_hardware()
        if self._cancel.cancelled:
            raise Cancelled("cancelled")
        profiler = Profiler(self.mode, hardware=hardware, progress=self._emit, cancel=self._cancel)
        return profiler.run()

    def _commit(self) -> bool:
        """From here on a cancel no longer applies; False if one came first."""
        with self._commit_lock:
            self._committed = not self._cancel.cancelled
            return self._committed

    def _emit(self, event: ProfilingEvent) -> None:
        try:
            self._report(event)
        except Exception:  # a listener's bug must not end the run or hide its outcome
            log.exception("profiling listener failed on %r", event)


def _one_line(text: str) -> str:
    return " ".join(text.split())
