"""What the Local API server panel does: run app.api.server inside the app, on the window's model.

The server serves whatever model the window's engine worker has loaded; this owns
it. Starting binds a socket and stopping ends the streams in flight (up to
seconds), so both run on a thread of their own (ui.server.server_switch, the switch the
Share panel has too) and report back through queued signals: the GUI thread never
waits on the network. The server's reports of clients coming and going arrive on
its own thread and are relayed the same way.

Switched on when the app last closed, it is switched on again once the next model
is loaded. On quit it is stopped before the worker shuts down.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.api.server_config import SHUTDOWN_SECONDS, ServerState
from app.screen_text.server_view import (
    ServerSettings,
    ServerView,
    refused,
    started,
    starting,
    stopped,
    stopping,
    with_settings,
    with_state,
)
from engine.errors import BadInputError
from ui.engine_bridge import EngineBridge
from ui.server.server_panel import ServerPanel
from ui.server.server_settings import ServerSettingsStore
from ui.server.server_switch import ServerSwitch
from ui.thread_bridge import GuiRelay

if TYPE_CHECKING:  # the window opens without the server's imports (aiohttp)
    from app.api.server import ApiEngine, ApiServer

QUIT_WAIT_S = SHUTDOWN_SECONDS + 10  # what stop() itself allows its loop, and a margin
SWITCH_THREAD = "shardchat-api-switch"


class ServerController(QObject):
    view_changed = Signal(object)  # ServerView: the status bar, the VRAM panel's slot count

    def __init__(
        self,
        panel: ServerPanel,
        worker: ApiEngine,
        bridge: EngineBridge,
        store: ServerSettingsStore | None = None,
    ) -> None:
        super().__init__(panel)
        self.panel, self.worker, self.bridge = panel, worker, bridge
        self.store = store or ServerSettingsStore()
        self.view = ServerView(settings=self.store.load())
        self._start_when_loaded = self.view.settings.enabled
        self._switch: ServerSwitch[ApiServer, str] = ServerSwitch(
            self,
            SWITCH_THREAD,
            "the API server",
            make=self._server_to_start,
            starting=lambda: self._show(starting(self.view)),
            started=self._on_started,
            failed=self._on_start_failed,
            stopping=self._on_stopping,
            stopped=lambda: self._show(stopped(self.view)),
            again=lambda: self._show(self.view),  # the switch shows the phase again
            says_why=BadInputError,  # a taken port, a foreign address (ServerStartError)
            other_errors="the server did not start: ",
        )
        self._reports = GuiRelay(self)  # the server's state reports, from its thread
        panel.switched.connect(self.switch)
        panel.settings_edited.connect(self._edit)
        bridge.model_loaded.connect(self._on_model_loaded)
        self._show(self.view)

    def switch(self, on: bool) -> None:
        """Start or stop serving; a switch while it is on its way up or down is not taken."""
        self._switch.switch(on)

    def report_state(self, state: ServerState) -> None:
        """The server's `on_state`, called from any thread: the view follows on the GUI's."""
        self._reports.post(self._on_state, state)

    def shutdown(self) -> None:
        """Before the worker goes (the app is closing): remember the settings, stop serving.

        The one place that waits for the network, boundedly, since the window is closing."""
        self.bridge.model_loaded.disconnect(self._on_model_loaded)
        self._reports.close()  # reports of the stop below go nowhere
        wanted = self.view.switched_on or self._start_when_loaded
        self._remember(wanted)
        self._switch.shutdown(QUIT_WAIT_S)

    # --- what the person did ---

    def _edit(self, settings: ServerSettings) -> None:
        if self.view.editable:
            self._show(with_settings(self.view, settings))

    def _server_to_start(self) -> ApiServer | None:
        """None where the settings describe no server: the panel says why, and nothing runs."""
        try:
            config = self.view.settings.config()
        except BadInputError as exc:
            self._show(refused(self.view, str(exc)))
            return None
        from app.api.server import ApiServer  # aiohttp: when the server is first switched on

        return ApiServer(self.worker, config, self.report_state)

    def _on_stopping(self) -> None:
        self._show(stopping(self.view))
        self._remember(False)

    # --- reports, on the GUI thread ---

    def _on_started(self, _server: ApiServer, address: str) -> None:
        self._show(started(self.view, address))
        self._remember(True)

    def _on_start_failed(self, message: str) -> None:
        self._show(refused(self.view, message))
        self._remember(False)

    def _on_state(self, state: ServerState) -> None:
        shown = with_state(self.view, state)
        if shown != self.view:
            self._show(shown)

    def _on_model_loaded(self, _event: object) -> None:
        """On when the app last closed: on again, now that there is a model to serve."""
        if self._start_when_loaded:
            self._start_when_loaded = False
            self.switch(True)

    # --- helpers ---

    def _show(self, view: ServerView) -> None:
        self.view = view
        self.panel.show_view(view)
        self.view_changed.emit(view)

    def _remember(self, enabled: bool) -> None:
        self.store.save(replace(self.view.settings, enabled=enabled))
