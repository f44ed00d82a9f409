"""Where log records go: always the log file; the terminal only when asked.

llama.cpp is chatty (hundreds of lines per load). The file keeps all of it
for support; `--verbose` also shows it on stderr.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

from app.paths import app_paths

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_MAX_LOG_BYTES = 5 * 1024 * 1024


def configure_logging(verbose: bool = False) -> Path:
    """Send all records to the rotating log file, and to stderr too when verbose."""
    log_file = app_paths().ensure().log_file
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_shardchat", False):
            root.removeHandler(handler)
            handler.close()
    to_file = logging.handlers.RotatingFileHandler(
        log_file, maxBytes=_MAX_LOG_BYTES, backupCount=3, encoding="utf-8"
    )
    _add(root, to_file, logging.DEBUG)
    if verbose:
        _add(root, logging.StreamHandler(sys.stderr), logging.DEBUG)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    return log_file


def _add(root: logging.Logger, handler: logging.Handler, level: int) -> None:
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter(_FORMAT))
    handler._shardchat = True  # type: ignore[attr-defined]
    root.addHandler(handler)
