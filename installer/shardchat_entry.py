"""The bundled executable's entry point (PyInstaller freezes this file, see shardchat.spec).

- no arguments (a double-click, the desktop entry, the Start menu): the window, as
  `shardchat gui` (which opens the profiling wizard on the first launch);
- arguments: the `shardchat` command line, unchanged (`--selftest`, `chat`, `profile`...);
- `-m engine.child_process REQUEST ANSWER`: a profiling child. The profiler starts its
  children as `sys.executable -m engine.child_process`, and in the bundle
  `sys.executable` is this program, not a Python interpreter.
"""

from __future__ import annotations

import runpy
import sys

CHILD_MODULE = "engine.child_process"


def main() -> int:
    argv = sys.argv[1:]
    if argv[:2] == ["-m", CHILD_MODULE]:
        sys.argv = [sys.argv[0], *argv[2:]]
        runpy.run_module(CHILD_MODULE, run_name="__main__", alter_sys=True)
        return 0  # the module exits through sys.exit; this is not reached
    from app.cli import main as cli_main

    return cli_main(argv or ["gui"])


if __name__ == "__main__":
    sys.exit(main())
