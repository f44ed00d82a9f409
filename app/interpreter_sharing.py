"""How soon a thread that waits for Python's interpreter gets it, in the window's process.

llama.cpp reports a model's load line by line, about 2,000 lines for the built-in model,
each through our log callback (engine.llama.log_capture), which needs the interpreter.
Python hands the interpreter to a waiting thread only once its holder has run for the
switch interval, 5 ms by default. So while the GUI thread runs Python (laying out a
long conversation, a panel), each line waits up to 5 ms: a load that takes 0.14 s alone
took 3.5 s beside a thread running Python (`bench/load_beside_python.py`); at 0.1 ms it
takes 0.24 s. A short interval costs nothing while no other thread waits.

A window started on a profiled machine sets it as soon as its model's load is queued
(app.early_engine): the load then runs beside Qt's imports and the window's first
layout, and side by side the window was ready 35-40 ms sooner with it (median of 9-15
launches each). Otherwise the window sets it once its first events have run
(ui.gui_main.run_desktop).
"""

from __future__ import annotations

import sys

SWITCH_INTERVAL_S = 0.0001


def share_the_interpreter_quickly() -> None:
    """From now on a waiting thread gets the interpreter within SWITCH_INTERVAL_S."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
