"""What the VRAM panel says of the other computers lent to this one, as plain values.

The list is `shardchat devices`' (the profile database's remote_machines): each
computer with its device's memory, the budget ShardChat may fill there, and its link
and speed as measured when it was added. Adding one checks and measures it (seconds),
so the view says what is being done meanwhile, and why an address was not kept.
The words are decided here, where they are tested without a window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from app.screen_text.units import format_bytes
from app.stores.remote_machines import RemoteMachine
from engine.remote.lent_budget import REMOTE_SHARE

WHERE_SPLITS_RUN = (
    'Models in this window run on this computer. Turn on "Run models across these '
    'computers" to split one across them (in the terminal: shardchat chat --lent).'
)
SPLITS_RUN_ACROSS = (
    "Models load across these computers, in a process of their own: if one of them stops "
    "answering, the reply ends there, the chat is kept, and the model loads without it."
)
NONE_YET = (
    "No other computers. On a computer with a GPU or spare memory, turn on sharing (its "
    "Share tab, or shardchat share), then add it here."
)


@dataclass(frozen=True)
class LentRow:
    address: str
    memory: str  # the device's, free of total, when it was last checked
    budget: str  # what ShardChat may fill there
    link: str
    speed: str


@dataclass(frozen=True)
class LentComputersView:
    rows: tuple[LentRow, ...] = ()
    busy: str = ""  # what is being done now (checking an address), or nothing
    error: str = ""  # why the last address was not kept, or the list not read
    split: str = ""  # the loaded model's split (run, or what `chat --lent` would run)
    across: bool = False  # "Run models across these computers" is on

    @property
    def note(self) -> str:
        if not self.rows:
            return NONE_YET
        return SPLITS_RUN_ACROSS if self.across else WHERE_SPLITS_RUN


def listed(
    machines: Sequence[RemoteMachine], view: LentComputersView | None = None
) -> LentComputersView:
    """The computers kept now, with what `view` said of the loaded model and the switch."""
    rows = tuple(_row(machine) for machine in machines)
    if view is None:
        return LentComputersView(rows=rows)
    return LentComputersView(rows=rows, split=view.split, across=view.across)


def with_split(
    view: LentComputersView, model_name: str, said: str, running: bool = False
) -> LentComputersView:
    """The loaded model's split over these computers (`said`: app.lent.split's line):
    `running` when it runs so now, else what it would run as."""
    if not said:
        return replace(view, split="")
    how = "runs across these computers" if running else "across these computers"
    return replace(view, split=f"{model_name} {how}: {said}")


def running_across(view: LentComputersView, on: bool) -> LentComputersView:
    return replace(view, across=on)


def checking(view: LentComputersView, address: str) -> LentComputersView:
    return replace(
        view,
        busy=f"Checking {address} and measuring its link and speed (seconds)…",
        error="",
    )


def failed(view: LentComputersView, why: str) -> LentComputersView:
    return replace(view, busy="", error=why)


def _row(machine: RemoteMachine) -> LentRow:
    device = machine.devices[0] if machine.devices else None
    memory = (
        f"{format_bytes(device.free_bytes)} free of {format_bytes(device.total_bytes)}"
        if device is not None
        else "no device"
    )
    budget = (
        format_bytes(machine.budget_bytes)
        if machine.budget_bytes is not None
        else f"{REMOTE_SHARE:.0%} of what is free"
    )
    return LentRow(machine.address, memory, budget, _link(machine), _speed(machine))


def _link(machine: RemoteMachine) -> str:
    """Round trip, then bandwidth up / down (the column's header says so)."""
    link = machine.link
    if link is None:
        return "not measured"
    up, down = link.upload_bytes_per_s * 8 / 1e9, link.download_bytes_per_s * 8 / 1e9
    return f"{link.round_trip_s * 1000:.2f} ms, {up:.2f} / {down:.2f} Gbit/s"


def _speed(machine: RemoteMachine) -> str:
    speed = machine.speed
    if speed is None:
        return "not measured: add it again"
    return (
        f"{speed.times_this_machine:.2f}x this one, +{speed.step_overhead_s * 1000:.2f} ms a step"
    )
