"""What the API server is set to, and what its status says: the window's server panel
and `shardchat serve --help` read these without importing the server (aiohttp)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import BadInputError

DEFAULT_PORT = 8088
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_BODY_BYTES = 32 * 2**20  # room for a few data-URL images
SHUTDOWN_SECONDS = 2.0  # streams still open when the server stops are cut after this


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    n_slots: int = 4
    n_ctx_per_slot: int = 4096
    max_queue: int = 32  # requests waiting for a slot before 429
    max_body_bytes: int = MAX_BODY_BYTES
    log_prompts: bool = False
    # a request may name any model of the model library: it is loaded once the API is idle
    allow_model_switch: bool = False

    def __post_init__(self) -> None:
        if self.host not in LOOPBACK and not self.api_key:
            raise BadInputError(
                f"listening on {self.host} exposes the model to the network: set an API key "
                "(--api-key) or use 127.0.0.1"
            )
        if not 0 <= self.port <= 65535:
            raise BadInputError(f"port must be 0-65535, not {self.port}")
        if self.n_slots < 1:
            raise BadInputError("the server needs at least one slot")


@dataclass(frozen=True)
class ServerState:
    """What the status bar shows: off, or listening on an address with N clients."""

    address: str | None = None
    active: int = 0
    waiting: int = 0
    error: str | None = None

    @property
    def listening(self) -> bool:
        return self.address is not None
