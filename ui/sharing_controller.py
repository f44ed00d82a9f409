"""What the Share panel does: lend this computer through llama.cpp's RPC server.

Starting waits for the server to answer a probe (up to seconds) and stopping for it
to end, so both run on daemon threads and report back through a relay: the GUI
thread never waits, except at quit, when the server is stopped before the window
goes (nothing stays lent after the app). A server that ends by itself says why.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from PySide6.QtCore import QObject

from app.paths import app_paths
from app.screen_text.sharing_view import (
    SharingPhase,
    SharingView,
    started,
    starting,
    stopped,
    stopping,
)
from engine.errors import ShardChatError
from engine.remote.rpc_probe import RemoteServer
from engine.remote.sharing import ShareSettings, SharingServer
from ui.sharing_panel import SharingPanel
from ui.thread_bridge import GuiRelay

log = logging.getLogger(__name__)

SWITCH_THREAD = "shardchat-share-switch"
WATCH_THREAD = "shardchat-share-watch"


class SharingController(QObject):
    def __init__(self, panel: SharingPanel) -> None:
        super().__init__(panel)
        self.panel = panel
        self.view = SharingView()
        self._server: SharingServer | None = None  # running, or on its way up or down
        self._relay = GuiRelay(self)
        panel.switched.connect(self.switch)
        panel.port_edited.connect(self._edit_port)
        self._show(self.view)

    def switch(self, on: bool) -> None:
        """Start or stop lending; a switch while it is on its way up or down is not taken."""
        if on and self.view.phase is SharingPhase.OFF:
            self._start()
        elif not on and self.view.phase is SharingPhase.ON:
            self._stop()
        else:
            self._show(self.view)

    def shutdown(self) -> None:
        """At quit: stop the server (seconds at most), so nothing stays lent."""
        self._relay.close()
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    def _edit_port(self, port: int) -> None:
        if self.view.editable:
            self._show(replace(self.view, port=port, error=""))

    def _start(self) -> None:
        paths = app_paths().ensure()
        server = SharingServer(
            ShareSettings(port=self.view.port),
            paths.lent_tensors_dir,
            paths.rpc_server_log,
        )
        self._server = server
        self._show(starting(self.view))
        self._relay.in_daemon_thread(
            SWITCH_THREAD,
            server.start,
            lambda lent: self._on_started(server, lent),
            lambda error: self._on_start_failed(server, error),
        )

    def _stop(self) -> None:
        server, self._server = self._server, None
        self._show(stopping(self.view))
        if server is None:
            self._show(stopped(self.view))
            return
        self._relay.in_daemon_thread(
            SWITCH_THREAD,
            server.stop,
            lambda _none: self._show(stopped(self.view)),
            lambda _error: self._show(stopped(self.view)),
        )

    def _on_started(self, server: SharingServer, lent: RemoteServer) -> None:
        if server is not self._server:
            return  # switched off (or quit) meanwhile
        self._show(started(self.view, lent))
        self._relay.in_daemon_thread(
            WATCH_THREAD, server.wait, lambda code: self._on_exited(server, code)
        )

    def _on_start_failed(self, server: SharingServer, error: BaseException) -> None:
        if not isinstance(error, ShardChatError):  # a taken port says why; anything else is a bug
            log.error("sharing did not start", exc_info=error)
        if server is self._server:
            self._server = None
            self._show(stopped(self.view, str(error)))

    def _on_exited(self, server: SharingServer, code: int | None) -> None:
        if server is self._server:  # not stopped by us: it ended by itself
            self._server = None
            self._show(
                stopped(self.view, f"the RPC server stopped (exit {code}): {server.last_words()}")
            )

    def _show(self, view: SharingView) -> None:
        self.view = view
        self.panel.show_view(view)
