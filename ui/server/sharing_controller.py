"""What the Share panel does: lend this computer through llama.cpp's RPC server.

Starting waits for the server to answer a probe (up to seconds) and stopping for it
to end, so both run on daemon threads (ui.server.server_switch, the switch the Local API
server panel has too) and report back through a relay: the GUI thread never waits,
except at quit, when the server is stopped before the window goes (nothing stays
lent after the app). A server that ends by itself says why.
"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import QObject

from app.paths import app_paths
from app.screen_text.sharing_view import SharingView, started, starting, stopped, stopping
from engine.errors import ShardChatError
from engine.remote.rpc_probe import RemoteServer
from engine.remote.sharing import ShareSettings, SharingServer
from ui.server.server_switch import ServerSwitch
from ui.server.sharing_panel import SharingPanel

SWITCH_THREAD = "shardchat-share-switch"
WATCH_THREAD = "shardchat-share-watch"
QUIT_WAIT_S = 10.0  # a start under way answers within seconds; past this it is stopped mid-way


class SharingController(QObject):
    def __init__(self, panel: SharingPanel) -> None:
        super().__init__(panel)
        self.panel = panel
        self.view = SharingView()
        self._switch: ServerSwitch[SharingServer, RemoteServer] = ServerSwitch(
            self,
            SWITCH_THREAD,
            "sharing",
            make=self._server_to_start,
            starting=lambda: self._show(starting(self.view)),
            started=self._on_started,
            failed=lambda why: self._show(stopped(self.view, why)),
            stopping=lambda: self._show(stopping(self.view)),
            stopped=lambda: self._show(stopped(self.view)),
            again=lambda: self._show(self.view),
            says_why=ShardChatError,  # a taken port says why; anything else is a bug
        )
        panel.switched.connect(self.switch)
        panel.port_edited.connect(self._edit_port)
        self._show(self.view)

    def switch(self, on: bool) -> None:
        """Start or stop lending; a switch while it is on its way up or down is not taken."""
        self._switch.switch(on)

    def shutdown(self) -> None:
        """At quit: stop the server (seconds at most), so nothing stays lent."""
        self._switch.shutdown(QUIT_WAIT_S)

    def _edit_port(self, port: int) -> None:
        if self.view.editable:
            self._show(replace(self.view, port=port, error=""))

    def _server_to_start(self) -> SharingServer:
        paths = app_paths().ensure()
        return SharingServer(
            ShareSettings(port=self.view.port),
            paths.lent_tensors_dir,
            paths.rpc_server_log,
        )

    def _on_started(self, server: SharingServer, lent: RemoteServer) -> None:
        self._show(started(self.view, lent))
        self._switch.watch(
            WATCH_THREAD,
            server,
            server.wait,
            lambda code: f"the RPC server stopped (exit {code}): {server.last_words()}",
        )

    def _show(self, view: SharingView) -> None:
        self.view = view
        self.panel.show_view(view)
