"""The bundled executable's entry point (PyInstaller freezes this file, see shardchat.spec).

- no arguments (a double-click, the desktop entry, the Start menu): the window, as
  `shardchat gui` (which opens the profiling wizard on the first launch);
- arguments: the `shardchat` command line, unchanged (`--selftest`, `chat`, `profile`...);
- `-m MODULE ARGS`: one of the app's own child processes, which it starts as
  `sys.executable -m MODULE` (in the bundle `sys.executable` is this program, not a
  Python interpreter): a profiling child (`engine.child_process REQUEST ANSWER`), the
  window's engine for a model split onto lent computers (`app.engine_host.child_engine_process FD`)
  and the chat of `shardchat chat --lent` (`app.cli.main chat ...`).
"""

from __future__ import annotations

import runpy
import sys

CHILD_MODULES = ("engine.child_process", "app.engine_host.child_engine_process", "app.cli.main")


def main() -> int:
    argv = sys.argv[1:]
    if len(argv) >= 2 and argv[0] == "-m" and argv[1] in CHILD_MODULES:
        sys.argv = [sys.argv[0], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0  # the module exits through sys.exit; this is not reached
    from app.cli.main import main as cli_main

    return cli_main(argv or ["gui"])


if __name__ == "__main__":
    sys.exit(main())
