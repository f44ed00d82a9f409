"""What the window's Local API server panel and its status bar label say, as plain values.

The window can run app.api.server itself, on the model it has loaded. The panel
renders a `ServerView`; the controller (ui.server.server_controller) moves it from phase
to phase (off → starting → on → stopping → off) with the functions below and
hands it back. The words (the address to copy, the line for a client's settings,
why the key is needed, why it is off) are decided here, where they can be tested
without a window.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from app.api.server_config import DEFAULT_PORT, LOOPBACK, ServerConfig, ServerState
from engine.errors import BadInputError

DEFAULT_SLOTS = 4
CLI_HINTS = (" (--port)", " (--api-key)", " (--host)")  # the server's words are the CLI's


class ServerPhase(Enum):
    OFF = "off"
    STARTING = "starting"
    ON = "on"
    STOPPING = "stopping"


@dataclass(frozen=True)
class ServerSettings:
    """What the person chose in the panel; kept between runs (the key apart, as a secret)."""

    enabled: bool = False  # on when the app closed: on again once the next model is loaded
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT  # 0: any free port, the system's choice
    api_key: str = ""
    n_slots: int = DEFAULT_SLOTS  # requests decoded together
    cors_origins: str = ""  # comma-separated, as typed

    @property
    def origins(self) -> tuple[str, ...]:
        return tuple(origin.strip() for origin in self.cors_origins.split(",") if origin.strip())

    @property
    def needs_key(self) -> bool:
        """Another address than loopback puts the model on the network: a key is required."""
        return self.host.strip() not in LOOPBACK

    def config(self) -> ServerConfig:
        """The server's configuration; BadInputError in the panel's words when there is none."""
        host, key = self.host.strip(), self.api_key.strip()
        if not host:
            raise BadInputError("enter the address to listen on, e.g. 127.0.0.1")
        if self.needs_key and not key:
            raise BadInputError(
                f"listening on {host} puts the model on the network: enter an API key, "
                "or listen on 127.0.0.1"
            )
        return ServerConfig(
            host=host, port=self.port, api_key=key or None, cors_origins=self.origins,
            n_slots=self.n_slots,
        )  # fmt: skip


@dataclass(frozen=True)
class ServerView:
    settings: ServerSettings = field(default_factory=ServerSettings)
    phase: ServerPhase = ServerPhase.OFF
    address: str | None = None  # "http://host:port" while on
    active: int = 0  # requests in flight (running or waiting for a slot)
    error: str = ""  # why it is off: the last start failed, or the settings were refused

    @property
    def base_url(self) -> str | None:
        """What a client's base_url is: the address with /v1, while on."""
        return f"{self.address}/v1" if self.address and self.phase is ServerPhase.ON else None

    @property
    def editable(self) -> bool:
        """The settings can change only while it is off (a change needs a restart)."""
        return self.phase is ServerPhase.OFF

    @property
    def switched_on(self) -> bool:
        return self.phase in (ServerPhase.STARTING, ServerPhase.ON)

    @property
    def serving_slots(self) -> int | None:
        """Sequences the API decodes together while it is on (the VRAM panel predicts them)."""
        return self.settings.n_slots if self.phase is ServerPhase.ON else None


def with_settings(view: ServerView, settings: ServerSettings) -> ServerView:
    return replace(view, settings=settings)


def starting(view: ServerView) -> ServerView:
    return replace(view, phase=ServerPhase.STARTING, error="", address=None, active=0)


def started(view: ServerView, address: str) -> ServerView:
    return replace(view, phase=ServerPhase.ON, address=address, error="")


def refused(view: ServerView, message: str) -> ServerView:
    """Off, saying why in one line (a taken port, a host without a key)."""
    for hint in CLI_HINTS:
        message = message.replace(hint, "")
    return replace(view, phase=ServerPhase.OFF, address=None, active=0, error=message)


def stopping(view: ServerView) -> ServerView:
    return replace(view, phase=ServerPhase.STOPPING)


def stopped(view: ServerView) -> ServerView:
    return replace(view, phase=ServerPhase.OFF, address=None, active=0)


def with_state(view: ServerView, state: ServerState) -> ServerView:
    """Clients came or went (the server's report); ignored once it is going off."""
    if view.phase is not ServerPhase.ON:
        return view
    return replace(view, active=state.active)


def status_text(view: ServerView) -> str:
    """The status bar's label: "API off", "API http://127.0.0.1:8088/v1 · 2 clients"."""
    if view.phase is ServerPhase.STARTING:
        return "API starting…"
    if view.phase is ServerPhase.STOPPING:
        return "API stopping…"
    if view.base_url is None:
        return "API off"
    if not view.active:
        return f"API {view.base_url}"
    return f"API {view.base_url} · {view.active} client{'' if view.active == 1 else 's'}"


def client_hint(view: ServerView) -> str:
    """The line to give an OpenAI client, while on; what "on" would do, while off."""
    if view.base_url is None:
        return (
            "Off. Once on, OpenAI clients (the openai library, editors, web UIs) reach the "
            "loaded model at the address above."
        )
    key = "api_key=the key above" if view.settings.api_key.strip() else "any api_key"
    return f"base_url={view.base_url}, {key}"


def key_note(settings: ServerSettings) -> str:
    """Under the key field: whether it is required here, and how clients send it."""
    if settings.needs_key and not settings.api_key.strip():
        return "Required: this host is reachable from the network."
    if settings.needs_key:
        return "Required off 127.0.0.1; clients send it as their api_key."
    return "Optional on 127.0.0.1; clients then send it as their api_key."
