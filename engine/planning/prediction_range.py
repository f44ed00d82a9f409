"""How sure a shown prediction is: a range, or "measured on this machine".

Why: people decide by these figures. Discover recommends a quant by its predicted
tokens/s before a download of many gigabytes, and one bare figure reads as a promise.
So a prediction is shown with the spread the calibration table measured for that kind
of machine (engine.machine.calibration: published llama.cpp results against what the
cost model predicts for them), and, once a loaded model's own steps have corrected it
(engine.planning.step_correction), as measured on this machine instead.

An error e means a prediction p was within e of the published figure f, p = f(1 ± e),
so what the machine will do lies in [p / (1 + e), p / (1 - e)].
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.machine.calibration import CPU_KIND, kind_error, machine_kind
from engine.machine.profile import Profile

MAX_ERROR = 0.9  # an error of 1 or more would put no upper bound on the range


@dataclass(frozen=True)
class Sureness:
    """The spread of one kind of prediction: `error` as a share, None once measured here."""

    error: float | None
    kind: str  # the calibration kind: "CUDA", "Vulkan", "Metal", "CPU", ...

    def bounds(self, predicted: float) -> tuple[float, float]:
        """Where the real figure is expected, given the prediction."""
        if self.error is None:
            return predicted, predicted
        error = min(self.error, MAX_ERROR)
        return predicted / (1 + error), predicted / (1 - error)

    def basis(self) -> str:
        """Where the range comes from, in words for a tooltip or a note."""
        if self.error is None:
            return "measured on this machine"
        machines = "CPU-only machines" if self.kind == CPU_KIND else f"{self.kind} machines"
        return (
            f"±{self.error:.0%}: how far predictions for {machines} were from published "
            "llama.cpp results"
        )


def sureness(profile: Profile, corrected_steps: int = 0) -> Sureness:
    """The spread of a profile's predictions; none once `corrected_steps` steps of this
    machine corrected them."""
    kind = machine_kind(profile)
    if corrected_steps > 0:
        return Sureness(None, kind)
    return Sureness(kind_error(kind), kind)
