"""How soon a thread that waits for Python's interpreter gets it, in the window's process.

llama.cpp reports a model's load line by line, about 2,000 lines for the built-in model,
each through our log callback (engine.llama.log_capture), which needs the interpreter.
Python hands the interpreter to a waiting thread only once its holder has run for the
switch interval, 5 ms by default. So while the GUI thread runs Python (laying out a
long conversation, a panel), each line waits up to 5 ms: a load that takes 0.14 s alone
took 3.5 s beside a thread running Python (`bench/load_beside_python.py`); at 0.1 ms it
takes 0.24 s. A short interval costs nothing while no other thread waits.

A window started on a profiled machine shortens it to 10 us as soon as its model's load
is queued (app.engine_host.early_engine): the load's lines then come while Qt is imported and the
window laid out, Python all the way, and each waited for it. Side by side (medians of
9-11 launches, alternating) the window was ready 35-40 ms sooner at 0.1 ms than at 5,
and another 15-25 ms sooner at 10 us; the window's imports were not slower. Once the
window's first events have run (ui.gui_main.run_desktop) the interval is 0.1 ms for the
rest of the session: from then two threads running Python at once are the common case
(a reply streams while the window draws it), and each hand-over costs both a switch.
"""

from __future__ import annotations

import sys

SWITCH_INTERVAL_S = 0.0001
START_UP_SWITCH_INTERVAL_S = 0.00001  # while the window imports and lays out beside a load


def share_the_interpreter_quickly() -> None:
    """From now on a waiting thread gets the interpreter within SWITCH_INTERVAL_S."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def share_the_interpreter_at_once() -> None:
    """Until share_the_interpreter_quickly: within START_UP_SWITCH_INTERVAL_S."""
    sys.setswitchinterval(START_UP_SWITCH_INTERVAL_S)
