"""What the window's Share panel says, as plain values: lending this computer to others.

The panel renders a `SharingView`; ui.server.sharing_controller moves it from phase to phase
(off → starting → on → stopping → off). The words (what is lent, how the other
computer reaches it, why it is off) are decided here, where they are tested
without a window. The window lends on 127.0.0.1 only: the other computer comes in
through SSH, and listening on a network is the command line's explicit option.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from engine.remote.addresses import DEFAULT_RPC_PORT
from engine.remote.rpc_probe import RemoteServer


class SharingPhase(Enum):
    OFF = "off"
    STARTING = "starting"
    ON = "on"
    STOPPING = "stopping"


@dataclass(frozen=True)
class SharingView:
    phase: SharingPhase = SharingPhase.OFF
    port: int = DEFAULT_RPC_PORT
    lent: RemoteServer | None = None  # what the running server serves
    error: str = ""  # why it is off, after a failed start or a server that stopped

    @property
    def switched_on(self) -> bool:
        return self.phase in (SharingPhase.STARTING, SharingPhase.ON)

    @property
    def editable(self) -> bool:
        return self.phase is SharingPhase.OFF


def starting(view: SharingView) -> SharingView:
    return replace(view, phase=SharingPhase.STARTING, lent=None, error="")


def started(view: SharingView, lent: RemoteServer) -> SharingView:
    return replace(view, phase=SharingPhase.ON, lent=lent, error="")


def stopping(view: SharingView) -> SharingView:
    return replace(view, phase=SharingPhase.STOPPING)


def stopped(view: SharingView, error: str = "") -> SharingView:
    return replace(view, phase=SharingPhase.OFF, lent=None, error=error)


def status_text(view: SharingView) -> str:
    """What is lent, and how the other computer reaches it; or what is happening."""
    if view.phase is SharingPhase.STARTING:
        return "Starting llama.cpp's RPC server…"
    if view.phase is SharingPhase.STOPPING:
        return "Stopping…"
    if view.phase is SharingPhase.OFF or view.lent is None:
        return (
            "Off. When on, ShardChat on another computer can place parts of a model on this "
            "one's GPU and memory, through SSH."
        )
    devices = ", ".join(
        f"device {device.index}: {device.free_bytes / 2**30:.1f} GiB free"
        for device in view.lent.devices
    )
    port = "" if view.port == DEFAULT_RPC_PORT else f" --rpc-port {view.port}"
    return (
        f"Lending on {view.lent.endpoint} ({devices}). Only this computer can reach it: "
        f"on the other computer, run\nshardchat devices add ssh://USER@THIS-COMPUTER{port}"
    )
