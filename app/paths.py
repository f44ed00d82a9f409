"""Where ShardChat keeps its data and logs.

platformdirs gives each operating system's usual place. SHARDCHAT_HOME
overrides all of them with one folder, so tests and benchmarks never touch a
person's real chats, profiles or logs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "ShardChat"
HOME_ENV = "SHARDCHAT_HOME"


@dataclass(frozen=True)
class AppPaths:
    data_dir: Path
    log_dir: Path
    config_dir: Path  # settings and secrets (a Hugging Face token when no keyring exists)

    @property
    def log_file(self) -> Path:
        return self.log_dir / "shardchat.log"

    @property
    def lent_tensors_dir(self) -> Path:
        """Where this computer's RPC server caches the tensors others sent (shardchat share)."""
        return self.data_dir / "lent-tensors"

    @property
    def rpc_server_log(self) -> Path:
        return self.log_dir / "rpc-server.log"

    def ensure(self) -> AppPaths:
        for folder in (self.data_dir, self.log_dir):
            folder.mkdir(parents=True, exist_ok=True)
        return self


def app_paths() -> AppPaths:
    """The folders for this user, honouring SHARDCHAT_HOME (read on every call)."""
    home = os.environ.get(HOME_ENV)
    if home:
        root = Path(home).expanduser()
        return AppPaths(data_dir=root / "data", log_dir=root / "logs", config_dir=root / "config")
    return AppPaths(
        data_dir=Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)),
        log_dir=Path(platformdirs.user_log_dir(APP_NAME, appauthor=False)),
        config_dir=Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)),
    )
