"""The type of the `shardchat` fixture (tests/conftest.py): a command line run in this
process, answered as `subprocess.run` answers, so a test reads the same either way."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

CliRun = Callable[..., "subprocess.CompletedProcess[str]"]
