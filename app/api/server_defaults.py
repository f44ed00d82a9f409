"""The API server's default port, which `shardchat serve --help` shows without importing
the server (aiohttp)."""

from __future__ import annotations

DEFAULT_PORT = 8088
