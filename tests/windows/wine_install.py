"""ShardChat installed in a Wine prefix, and how to run it there (tests/windows)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Installed:
    """ShardChat installed in a Wine prefix, and how to run it there."""

    prefix: Path
    env: dict[str, str]
    setup: Path
    folder: Path  # %LOCALAPPDATA%\\Programs\\ShardChat, as a Linux path
    local_app_data: Path  # %LOCALAPPDATA%, as a Linux path

    @property
    def exe(self) -> Path:
        return self.folder / "shardchat.exe"

    @property
    def user_data(self) -> Path:
        return self.local_app_data / "ShardChat"

    def run(
        self, *args: str, timeout: float = 600, env: dict[str, str] | None = None, **kwargs
    ) -> subprocess.CompletedProcess[str]:
        """shardchat.exe ARGS under Wine, its output read as UTF-8."""
        return subprocess.run(
            ["wine", str(self.exe), *args],
            env={**self.env, **(env or {})},
            stdin=kwargs.pop("stdin", subprocess.DEVNULL),
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
            **kwargs,
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        """shardchat.exe ARGS under Wine, left running: its output read as UTF-8 lines."""
        return subprocess.Popen(
            ["wine", str(self.exe), *args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            encoding="utf-8",
        )
