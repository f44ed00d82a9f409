"""The Share panel: its switch lends this computer through this build's RPC server, off
the GUI thread, and nothing stays lent once it is switched off or the app quits."""

from __future__ import annotations

import socket

import psutil
import pytest

from app.screen_text.sharing_view import SharingPhase
from engine.remote.rpc_probe import PROTOCOL_VERSION, RemoteUnreachable, probe
from tests.lent_computers import free_port
from ui.server.sharing_controller import SharingController
from ui.server.sharing_panel import SharingPanel


@pytest.fixture
def sharing(qtbot):
    panel = SharingPanel()
    qtbot.addWidget(panel)
    controller = SharingController(panel)
    yield panel, controller
    controller.shutdown()


def test_the_switch_lends_this_computer_and_says_how_to_reach_it(qtbot, sharing) -> None:
    panel, controller = sharing
    port = free_port()
    panel.port.setValue(port)
    panel.switch.click()
    assert panel.view().phase is SharingPhase.STARTING and not panel.port.isEnabled()
    qtbot.waitUntil(lambda: panel.view().phase is SharingPhase.ON, timeout=30_000)
    assert probe("127.0.0.1", port).version == PROTOCOL_VERSION
    text = panel.status.text()
    assert f"Lending on 127.0.0.1:{port}" in text and "shardchat devices add ssh://" in text
    panel.switch.click()
    qtbot.waitUntil(lambda: panel.view().phase is SharingPhase.OFF, timeout=30_000)
    assert panel.port.isEnabled() and not panel.error.isVisibleTo(panel)
    with pytest.raises(RemoteUnreachable):
        probe("127.0.0.1", port, connect_timeout_s=1.0)


def test_a_taken_port_turns_the_switch_off_with_the_servers_reason(qtbot, sharing) -> None:
    panel, _controller = sharing
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        panel.port.setValue(taken.getsockname()[1])
        panel.switch.click()
        qtbot.waitUntil(lambda: panel.view().phase is SharingPhase.OFF, timeout=30_000)
    assert not panel.switch.isChecked()
    assert "did not start" in panel.error.text() and panel.error.isVisibleTo(panel)


def test_quitting_stops_the_server(qtbot, sharing) -> None:
    panel, controller = sharing
    port = free_port()
    panel.port.setValue(port)
    panel.switch.click()
    qtbot.waitUntil(lambda: panel.view().phase is SharingPhase.ON, timeout=30_000)
    controller.shutdown()
    with pytest.raises(RemoteUnreachable):
        probe("127.0.0.1", port, connect_timeout_s=1.0)


def test_a_server_that_dies_says_so(qtbot, sharing) -> None:
    panel, _controller = sharing
    panel.port.setValue(free_port())
    panel.switch.click()
    qtbot.waitUntil(lambda: panel.view().phase is SharingPhase.ON, timeout=30_000)
    (server,) = [p for p in psutil.Process().children() if p.name() == "ggml-rpc-server"]
    server.kill()  # the server ends without being asked
    qtbot.waitUntil(lambda: panel.view().phase is SharingPhase.OFF, timeout=30_000)
    assert "the RPC server stopped" in panel.error.text()
