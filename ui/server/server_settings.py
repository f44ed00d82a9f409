"""The Local API server's settings between runs: an INI file beside window.ini, the key apart.

Kept with Qt's QSettings in ShardChat's data folder, like ui.window_state (so
SHARDCHAT_HOME isolates it). The API key is not written in the INI: it goes to a
file only this user may read (0600) in the config folder, where the Hugging Face
token goes when no keyring exists. Not to the keyring itself: the key is read at
every start on the GUI thread, where a locked keyring's unlock prompt would hold
the window, and it is a password for this app's own port that the panel shows
anyway, not an account's.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from PySide6.QtCore import QSettings

from app.paths import app_paths
from app.screen_text.server_view import ServerSettings

log = logging.getLogger(__name__)

FILE_NAME = "api_server.ini"
KEY_FILE_NAME = "api_server_key"
GROUP = "api_server"


class ServerSettingsStore:
    def __init__(self) -> None:
        paths = app_paths().ensure()
        self._settings = QSettings(str(paths.data_dir / FILE_NAME), QSettings.Format.IniFormat)
        self._key_file = paths.config_dir / KEY_FILE_NAME

    def load(self) -> ServerSettings:
        """The settings saved last; defaults for what is missing or unreadable."""
        default = ServerSettings()
        stored = self._settings
        stored.beginGroup(GROUP)
        try:
            return ServerSettings(
                enabled=str(stored.value("enabled", "false")).lower() == "true",
                host=str(stored.value("host", default.host) or default.host),
                port=_number(stored.value("port"), default.port, 0, 65535),
                api_key=_read_key(self._key_file),
                n_slots=_number(stored.value("slots"), default.n_slots, 1, 256),
                cors_origins=str(stored.value("cors_origins", "") or ""),
            )
        finally:
            stored.endGroup()

    def save(self, settings: ServerSettings) -> None:
        stored = self._settings
        stored.beginGroup(GROUP)
        stored.setValue("enabled", "true" if settings.enabled else "false")
        stored.setValue("host", settings.host)
        stored.setValue("port", settings.port)
        stored.setValue("slots", settings.n_slots)
        stored.setValue("cors_origins", settings.cors_origins)
        stored.endGroup()
        stored.sync()
        _write_key(self._key_file, settings.api_key.strip())


def _number(value: object, default: int, lowest: int, highest: int) -> int:
    text = str(value or "").strip()
    return min(max(int(text), lowest), highest) if text.isdigit() else default


def _read_key(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def _write_key(path: Path, key: str) -> None:
    if not key:
        path.unlink(missing_ok=True)
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(key)
        os.chmod(path, 0o600)  # a file made before keeps its old mode through O_CREAT
    except OSError as exc:  # the key is asked again next time; the app goes on closing
        log.warning("could not keep the API key in %s: %s", path, exc)
