"""Where the catalogue talks to, who it says it is, and where downloads go.

- Endpoint: `HF_ENDPOINT`, as huggingface_hub and every Hugging Face tool read it,
  so a mirror set for those works here too. Read on every call (tests and a
  changed environment see the new value), not once at import as the library does.
- Token, for gated repositories, first found of: `HF_TOKEN`, the token file the
  `hf` CLI writes (both through huggingface_hub's own `get_token`), and one the
  user entered here, kept in the OS keyring when a real backend exists, else in a
  0600 file in ShardChat's config folder.
- Models folder: under the data folder unless the user chose another; kept in a
  small JSON file in the config folder.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub
import keyring
import keyring.backends.fail
import keyring.errors

from app.paths import app_paths
from app.stores.atomic_files import write_text_atomic

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
KEYRING_SERVICE = "ShardChat"
KEYRING_USER = "huggingface-token"
TOKEN_FILE_NAME = "hf_token"
SETTINGS_FILE_NAME = "hub.json"


def hub_endpoint() -> str:
    """The Hub (or mirror) to talk to, without a trailing slash."""
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/") or DEFAULT_ENDPOINT


@dataclass(frozen=True)
class HubToken:
    value: str
    source: str  # "HF_TOKEN", "hf CLI login", "keyring", "file"


def hub_token() -> HubToken | None:
    """The token to send, and where it came from (said in the UI, never the token itself)."""
    if os.environ.get("HF_TOKEN", "").strip():
        return HubToken(os.environ["HF_TOKEN"].strip(), "HF_TOKEN")
    with contextlib.suppress(Exception):  # a broken token file must not stop a search
        found = huggingface_hub.get_token()
        if found:
            return HubToken(found, "hf CLI login")
    stored = _stored_token()
    return stored


def save_token(token: str) -> str:
    """Keep a token the user entered; returns where it went ("keyring" or the file's path)."""
    token = token.strip()
    if not token:
        raise ValueError("the token is empty")
    if _usable_keyring():
        try:
            keyring.set_password(KEYRING_SERVICE, KEYRING_USER, token)
            _token_file().unlink(missing_ok=True)
            return "keyring"
        except keyring.errors.KeyringError as exc:
            log.warning("keyring refused the token (%s); keeping it in a file", exc)
    path = _token_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(token)
    os.chmod(path, 0o600)  # an existing file keeps its old mode through O_CREAT
    return str(path)


def forget_token() -> None:
    """Remove the token entered here (HF_TOKEN and the hf CLI's stay theirs)."""
    if _usable_keyring():
        with contextlib.suppress(keyring.errors.KeyringError):
            keyring.delete_password(KEYRING_SERVICE, KEYRING_USER)
    _token_file().unlink(missing_ok=True)


def models_dir() -> Path:
    """Where downloads go: the user's choice, else `models` in the data folder."""
    chosen = _settings().get("models_dir")
    return Path(chosen) if chosen else app_paths().data_dir / "models"


def set_models_dir(folder: Path) -> Path:
    """Send later downloads to `folder` (made if needed); files already there stay put."""
    folder = folder.expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    settings = _settings()
    settings["models_dir"] = str(folder)
    path = app_paths().config_dir / SETTINGS_FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(settings, indent=1))
    return folder


def _settings() -> dict[str, str]:
    path = app_paths().config_dir / SETTINGS_FILE_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable %s: %s", path, exc)
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def _stored_token() -> HubToken | None:
    if _usable_keyring():
        try:
            value = keyring.get_password(KEYRING_SERVICE, KEYRING_USER)
        except keyring.errors.KeyringError:
            value = None
        if value:
            return HubToken(value, "keyring")
    try:
        value = _token_file().read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return HubToken(value, "file") if value else None


def _usable_keyring() -> bool:
    """A keyring backend that really stores secrets (not the 'fail' placeholder)."""
    try:
        backend = keyring.get_keyring()
    except Exception:  # a misconfigured backend is the same as none
        return False
    return not isinstance(backend, keyring.backends.fail.Keyring) and backend.priority > 0


def _token_file() -> Path:
    return app_paths().config_dir / TOKEN_FILE_NAME
