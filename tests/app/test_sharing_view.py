"""app.screen_text.sharing_view: what the Share panel says in each phase."""

from __future__ import annotations

from app.screen_text.sharing_view import (
    SharingPhase,
    SharingView,
    started,
    starting,
    status_text,
    stopped,
)
from engine.remote.rpc_probe import RemoteDevice, RemoteServer

LENT = RemoteServer("127.0.0.1", 50100, (7, 0, 0), (RemoteDevice(0, 3 * 2**30, 8 * 2**30),))


def test_a_lent_computer_says_its_address_memory_and_the_command_to_reach_it() -> None:
    view = started(starting(SharingView(port=50100)), LENT)
    text = status_text(view)
    assert view.phase is SharingPhase.ON and view.switched_on and not view.editable
    assert "Lending on 127.0.0.1:50100 (device 0: 3.0 GiB free)" in text
    assert text.endswith("shardchat devices add ssh://USER@THIS-COMPUTER --rpc-port 50100")


def test_the_default_port_needs_no_option_and_off_says_what_sharing_does() -> None:
    assert status_text(started(SharingView(), LENT)).endswith("ssh://USER@THIS-COMPUTER")
    off = stopped(started(SharingView(), LENT), "the RPC server stopped (exit -9)")
    assert off.lent is None and off.editable and off.error.endswith("(exit -9)")
    assert status_text(off).startswith("Off.")
