"""ui.server.server_switch, through both panels that have one: the Local API server on the desktop
app (the default model) and the Share panel (this build's RPC server), offscreen.

Each test runs once per panel: the switch is written once, and each controller only says
what its panel shows at each step.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.lent_computers import free_port
from tests.ui.test_desktop import TIMEOUT_MS
from ui.server import server_controller, sharing_controller
from ui.server.server_panel import ServerPanel
from ui.server.sharing_controller import SharingController
from ui.server.sharing_panel import SharingPanel


@dataclass
class Switched:
    """A panel whose switch starts a server, its controller, and the app's quit for it."""

    panel: ServerPanel | SharingPanel
    switch: Callable[[bool], None]  # the controller's, as the app calls it
    quit: Callable[[], None]
    thread_name: str  # the switch's thread, where the start and the stop run

    def phase(self) -> str:
        return self.panel.view().phase.value


@pytest.fixture(params=["api-server", "sharing"])
def switched(request, qtbot):
    if request.param == "api-server":
        desktop = request.getfixturevalue("open_desktop")(
            request.getfixturevalue("default_model_file")
        )
        request.getfixturevalue("desktops").append(desktop)
        desktop.window.server_action.trigger()  # the panel in front, as a person opens it
        yield Switched(
            desktop.window.server_panel,
            desktop.server.switch,
            desktop.close,
            server_controller.SWITCH_THREAD,
        )
    else:
        panel = SharingPanel()
        qtbot.addWidget(panel)
        controller = SharingController(panel)
        yield Switched(
            panel, controller.switch, controller.shutdown, sharing_controller.SWITCH_THREAD
        )
        controller.shutdown()


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def test_a_switch_flipped_again_on_the_way_up_or_down_is_not_taken(qtbot, switched) -> None:
    panel = switched.panel
    port = free_port()
    panel.port.setValue(port)
    panel.switch.click()
    assert switched.phase() == "starting" and panel.switch.isChecked()
    assert not panel.switch.isEnabled() and not panel.port.isEnabled()
    switched.switch(False)  # before the server is up: a stop cannot overtake its start
    switched.switch(True)  # nor a second server race the first for the port
    assert switched.phase() == "starting" and panel.switch.isChecked()
    qtbot.waitUntil(lambda: switched.phase() == "on", timeout=TIMEOUT_MS)
    assert listening(port) and panel.view().error == "" and panel.switch.isEnabled()
    panel.switch.click()
    assert switched.phase() == "stopping" and not panel.switch.isEnabled()
    switched.switch(True)
    assert switched.phase() == "stopping" and not panel.switch.isChecked()
    qtbot.waitUntil(lambda: switched.phase() == "off", timeout=TIMEOUT_MS)
    assert not listening(port) and panel.view().error == ""
    assert panel.switch.isEnabled() and panel.port.isEnabled()


def test_a_start_that_fails_says_why_in_one_line_and_the_switch_can_be_tried_again(
    qtbot, switched
) -> None:
    panel = switched.panel
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        panel.port.setValue(taken.getsockname()[1])
        panel.switch.click()
        qtbot.waitUntil(lambda: switched.phase() == "off", timeout=TIMEOUT_MS)
    why = panel.view().error
    assert why and "\n" not in why and "Traceback" not in why
    assert panel.error.text() == why and panel.error.isVisibleTo(panel)
    assert not panel.switch.isChecked() and panel.switch.isEnabled() and panel.port.isEnabled()
    port = free_port()
    panel.port.setValue(port)
    panel.switch.click()
    qtbot.waitUntil(lambda: switched.phase() == "on", timeout=TIMEOUT_MS)
    assert listening(port) and panel.view().error == "" and not panel.error.isVisibleTo(panel)


def test_quitting_on_the_way_up_leaves_nothing_serving(qtbot, switched) -> None:
    """The start under way ends before the quit stops its server: a server that does not
    listen yet cannot be told to stop, and would come up after the app."""
    port = free_port()
    switched.panel.port.setValue(port)
    switched.panel.switch.click()
    assert switched.phase() == "starting"
    switched.quit()
    assert not listening(port)

    def switch_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == switched.thread_name]

    qtbot.waitUntil(lambda: not switch_threads(), timeout=TIMEOUT_MS)  # a late start is over
    assert not listening(port)
