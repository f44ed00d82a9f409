"""The "auto" VRAM budget: follow the GPU's memory that other programs leave free.

When a game grabs VRAM, ShardChat's budget shrinks so it steps out of the way;
when the game quits, the budget grows back. The budget is what the GPU holds
minus what other processes use minus a reserve; small wobbles are ignored so
the model is not reloaded for every megabyte.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from engine.machine.gpu_probe import probe_gpus
from engine.machine.hardware_info import GpuInfo

log = logging.getLogger(__name__)

DEFAULT_RESERVE_BYTES = 512 << 20
DEFAULT_STEP_BYTES = 256 << 20


def first_gpu() -> GpuInfo | None:
    gpus, _reason, _driver, _cuda = probe_gpus()
    return gpus[0] if gpus else None


class AutoBudget:
    """Polls the GPU and calls `apply(budget)` when the budget moves by a step or more."""

    def __init__(
        self,
        apply: Callable[[int], object],
        read_gpu: Callable[[], GpuInfo | None] = first_gpu,
        reserve_bytes: int = DEFAULT_RESERVE_BYTES,
        step_bytes: int = DEFAULT_STEP_BYTES,
    ) -> None:
        self._apply = apply
        self._read_gpu = read_gpu
        self._reserve = reserve_bytes
        self._step = step_bytes
        self.budget_bytes: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def budget_for(self, gpu: GpuInfo | None) -> int:
        """VRAM the others leave, minus the reserve; 0 without a GPU."""
        if gpu is None:
            return 0
        return max(0, gpu.vram_total_bytes - gpu.other_processes_bytes - self._reserve)

    def poll_once(self) -> int | None:
        """Read the GPU once; returns the new budget if it was applied, else None."""
        budget = self.budget_for(self._read_gpu())
        if self.budget_bytes is not None and abs(budget - self.budget_bytes) < self._step:
            return None
        log.info("auto VRAM budget: %d MiB", budget >> 20)
        self.budget_bytes = budget
        self._apply(budget)
        return budget

    def start(self, interval_s: float = 2.0) -> AutoBudget:
        self._thread = threading.Thread(
            target=self._run, args=(interval_s,), name="shardchat-auto-budget", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self, interval_s: float) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # a probe hiccup must not end the auto budget
                log.exception("auto budget poll failed")
            self._stop.wait(interval_s)
