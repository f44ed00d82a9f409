"""The Local API server panel on the whole desktop app: the default model, a real server on a
loopback port, real HTTP from a background thread, offscreen.

The words the panel and the status bar say are checked first on plain views, without Qt.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from app.api.api_streams import model_id
from app.api.server_config import ServerState
from app.paths import app_paths
from app.screen_text.server_view import (
    ServerPhase,
    ServerSettings,
    ServerView,
    key_note,
    refused,
    started,
    starting,
    status_text,
    stopped,
    with_state,
)
from app.screen_text.units import speed_text
from engine.errors import BadInputError
from tests.ui.test_desktop import TIMEOUT_MS, send
from ui.desktop import Desktop
from ui.server.server_settings import FILE_NAME

# ---------------------------------------------------------------- the words, without Qt


def test_the_status_bar_says_off_the_address_and_the_clients() -> None:
    off = ServerView()
    assert status_text(off) == "API off"
    assert status_text(starting(off)) == "API starting…"
    on = started(starting(off), "http://127.0.0.1:8088")
    assert status_text(on) == "API http://127.0.0.1:8088/v1"
    assert status_text(with_state(on, ServerState("http://127.0.0.1:8088", 1))).endswith(
        "/v1 · 1 client"
    )
    assert status_text(with_state(on, ServerState("http://127.0.0.1:8088", 2))).endswith(
        "/v1 · 2 clients"
    )
    assert status_text(stopped(on)) == "API off" and stopped(on).serving_slots is None
    assert on.serving_slots == 4


def test_a_refusal_is_one_line_in_the_panels_words() -> None:
    view = refused(starting(ServerView()), "port 8088 is already in use on 127.0.0.1; "
                   "choose another (--port)")  # fmt: skip
    assert view.phase is ServerPhase.OFF and not view.switched_on
    assert view.error == "port 8088 is already in use on 127.0.0.1; choose another"


def test_a_network_host_needs_a_key() -> None:
    bare = ServerSettings(host="0.0.0.0", port=0)
    with pytest.raises(BadInputError, match="enter an API key"):
        bare.config()
    assert key_note(bare).startswith("Required")
    keyed = ServerSettings(host="0.0.0.0", port=0, api_key=" s3cret ", cors_origins="a, ,b")
    config = keyed.config()
    assert config.api_key == "s3cret" and config.cors_origins == ("a", "b")
    assert key_note(ServerSettings()).startswith("Optional")


# ---------------------------------------------------------------- the panel on the real app


def open_with_panel(qtbot, model: Path, open_desktop) -> Desktop:
    """The desktop app with the API server tab in front (Tools → Local API server…)."""
    desktop = open_desktop(model)
    desktop.window.server_action.trigger()
    assert desktop.window.server_dock.isVisible()
    return desktop


def click_switch(qtbot, desktop: Desktop, until: ServerPhase) -> ServerView:
    """Click the switch as a person would; returns the view once it reached `until`."""
    with qtbot.waitSignal(
        desktop.server.view_changed,
        timeout=TIMEOUT_MS,
        check_params_cb=lambda view: view.phase is until,
    ) as reached:
        qtbot.mouseClick(desktop.window.server_panel.switch, Qt.MouseButton.LeftButton)
    return reached.args[0]


def switch_on(qtbot, desktop: Desktop, port: int = 0) -> str:
    """Serve on `port` (0: any free one); the /v1 address the panel shows."""
    desktop.window.server_panel.port.setValue(port)
    click_switch(qtbot, desktop, ServerPhase.ON)
    return desktop.window.server_panel.address.text()


def fetch_json(qtbot, url: str) -> Any:
    """GET from a background thread (the GUI thread keeps running); the JSON or the error."""
    answers: list[Any] = []

    def get() -> None:
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                answers.append(json.load(response))
        except (OSError, ValueError) as exc:
            answers.append(exc)

    threading.Thread(target=get, daemon=True).start()
    qtbot.waitUntil(lambda: bool(answers), timeout=TIMEOUT_MS)
    return answers[0]


def port_of(base_url: str) -> int:
    return int(base_url.removesuffix("/v1").rpartition(":")[2])


def test_switching_on_serves_the_loaded_model_at_the_address_in_the_status_bar(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    desktop = open_with_panel(qtbot, default_model_file, open_desktop)
    desktops.append(desktop)
    panel, window = desktop.window.server_panel, desktop.window
    assert not panel.switch.isChecked() and window.api_label.text() == "API off"  # off by default
    assert panel.address.text() == "" and not panel.copy.isEnabled()
    base_url = switch_on(qtbot, desktop)
    assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
    assert port_of(base_url) > 0  # the port the system chose, not the 0 asked for
    assert panel.switch.isChecked() and not panel.port.isEnabled()  # settings wait for off
    assert window.api_label.text() == f"API {base_url}"
    assert window.api_label.accessibleName() == "Local API server"
    assert panel.hint.text() == f"base_url={base_url}, any api_key"
    listed = fetch_json(qtbot, f"{base_url}/models")
    assert [card["id"] for card in listed["data"]] == [model_id(str(default_model_file))]


def test_copy_puts_the_v1_address_on_the_clipboard(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    desktop = open_with_panel(qtbot, default_model_file, open_desktop)
    desktops.append(desktop)
    base_url = switch_on(qtbot, desktop)
    QGuiApplication.clipboard().setText("something else")
    qtbot.mouseClick(desktop.window.server_panel.copy, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == base_url
    assert desktop.window.statusBar().currentMessage() == f"copied {base_url}"


def test_clients_coming_and_going_show_in_the_status_bar(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    """The server reports on its own thread; the label follows on the GUI thread."""
    desktop = open_with_panel(qtbot, default_model_file, open_desktop)
    desktops.append(desktop)
    base_url = switch_on(qtbot, desktop)
    address = base_url.removesuffix("/v1")
    label = desktop.window.api_label
    for active, said in ((2, f"API {base_url} · 2 clients"), (1, f"API {base_url} · 1 client")):
        reporter = threading.Thread(
            target=desktop.server.report_state, args=(ServerState(address, active),)
        )
        reporter.start()
        qtbot.waitUntil(lambda said=said: label.text() == said, timeout=TIMEOUT_MS)
        reporter.join()


def test_a_taken_port_is_said_in_the_panel_and_the_switch_goes_back_off(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    desktop = open_with_panel(qtbot, default_model_file, open_desktop)
    desktops.append(desktop)
    panel = desktop.window.server_panel
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        panel.port.setValue(port)
        view = click_switch(qtbot, desktop, ServerPhase.OFF)
    assert view.error == f"port {port} is already in use on 127.0.0.1; choose another"
    assert panel.error.text() == view.error and not panel.error.isHidden()
    assert not panel.switch.isChecked() and panel.port.isEnabled()
    assert desktop.window.api_label.text() == "API off"
    send(qtbot, desktop, "Hello")  # the app goes on: the chat still answers
    base_url = switch_on(qtbot, desktop)  # and another port serves
    assert panel.error.isHidden() and isinstance(fetch_json(qtbot, f"{base_url}/models"), dict)


def test_a_network_host_without_a_key_is_refused_and_does_not_start(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    desktop = open_with_panel(qtbot, default_model_file, open_desktop)
    desktops.append(desktop)
    panel = desktop.window.server_panel
    panel.port.setValue(0)
    panel.host.clear()
    qtbot.keyClicks(panel.host, "0.0.0.0")
    assert panel.key_note.text().startswith("Required")
    view = click_switch(qtbot, desktop, ServerPhase.OFF)
    assert view.error == (
        "listening on 0.0.0.0 puts the model on the network: enter an API key, "
        "or listen on 127.0.0.1"
    )
    assert panel.error.text() == view.error and not panel.switch.isChecked()
    assert view.address is None and desktop.window.api_label.text() == "API off"


def test_switching_off_stops_the_server_and_frees_the_port(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    desktop = open_with_panel(qtbot, default_model_file, open_desktop)
    desktops.append(desktop)
    base_url = switch_on(qtbot, desktop)
    assert isinstance(fetch_json(qtbot, f"{base_url}/models"), dict)
    click_switch(qtbot, desktop, ServerPhase.OFF)
    panel = desktop.window.server_panel
    assert desktop.window.api_label.text() == "API off" and not panel.switch.isChecked()
    assert panel.address.text() == "" and panel.port.isEnabled()
    with socket.socket() as again:  # nobody listens there any more
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT only
        again.bind(("127.0.0.1", port_of(base_url)))
        again.listen()
    assert isinstance(fetch_json(qtbot, f"{base_url}/models"), urllib.error.URLError)


def test_the_vram_panels_batch_row_predicts_the_servers_slots_while_it_serves(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    desktop = open_with_panel(qtbot, default_model_file, open_desktop)
    desktops.append(desktop)
    vram = desktop.window.vram_panel
    plan = desktop.vram.plan
    assert plan is not None

    def predicted(n_sequences: int) -> str:
        tier = plan.tier_for(n_sequences)
        tokens_per_s = next(t.tokens_per_s for t in plan.tiers if t.tier == tier)
        return f"{speed_text(tokens_per_s, 'tokens/s')} predicted"

    assert vram.batch_label.text() == "Batch (16)" and vram.batch.text() == predicted(16)
    desktop.window.server_panel.slots.setValue(2)
    switch_on(qtbot, desktop)
    assert vram.batch_label.text() == "API (2 slots)" and vram.batch.text() == predicted(2)
    click_switch(qtbot, desktop, ServerPhase.OFF)
    assert vram.batch_label.text() == "Batch (16)" and vram.batch.text() == predicted(16)


def test_on_when_the_app_closed_it_is_on_again_at_the_next_start(
    qtbot, desktops, default_model_file, open_desktop
) -> None:
    desktop = open_with_panel(qtbot, default_model_file, open_desktop)
    panel = desktop.window.server_panel
    panel.slots.setValue(3)
    qtbot.keyClicks(panel.api_key, "s3cret")
    switch_on(qtbot, desktop)
    desktop.close()  # stops it: the port is free for the next start
    again = open_desktop(default_model_file)  # the model loaded: the server starts
    desktops.append(again)
    qtbot.waitUntil(lambda: again.server.view.phase is ServerPhase.ON, timeout=TIMEOUT_MS)
    shown = again.window.server_panel
    assert shown.switch.isChecked() and shown.slots.value() == 3
    assert shown.api_key.text() == "s3cret"
    assert again.window.api_label.text() == f"API {shown.address.text()}"
    ini = (app_paths().data_dir / FILE_NAME).read_text()
    assert "slots=3" in ini and "s3cret" not in ini  # the key is kept apart, 0600
    click_switch(qtbot, again, ServerPhase.OFF)
    again.close()
    third = open_desktop(default_model_file)
    desktops.append(third)
    assert third.server.view.phase is ServerPhase.OFF  # off when it closed: off again
