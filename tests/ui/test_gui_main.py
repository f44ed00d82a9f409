"""Start-up work waited for with the Qt event loop running (ui.gui_main.wait_spinning)."""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from PySide6.QtCore import QTimer

from engine.errors import BadInputError
from ui.gui_main import wait_spinning


def test_the_event_loop_runs_while_the_work_does(qapp) -> None:
    """The work finishes only once a Qt timer has fired: a blocking wait would time it out."""
    timer_fired = threading.Event()
    QTimer.singleShot(0, timer_fired.set)
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(timer_fired.wait, 10)
        assert wait_spinning(future) is True


def test_the_work_s_exception_reaches_the_caller(qapp) -> None:
    def refuse() -> None:
        raise BadInputError("no such model")

    with ThreadPoolExecutor(max_workers=1) as pool, pytest.raises(BadInputError, match="no such"):
        wait_spinning(pool.submit(refuse))


def test_work_already_done_is_returned_without_a_loop(qapp) -> None:
    done: Future[str] = Future()
    done.set_result("probed")
    assert wait_spinning(done) == "probed"


LEAVING_MID_STEP = """
import threading
from engine.llama.load_params import LoadParams
from engine.model.default_model import default_model_path
from engine.runtime.loaded_model import load_model
from ui.gui_main import leave_if_llama_still_runs

model = load_model(LoadParams(str(default_model_path()), n_ctx=4096, n_batch=4096, n_threads=1))
tokens = model.llm.tokenize(b"word " * 3000)
decoding = threading.Event()

def decode():
    decoding.set()
    model.llm.eval(tokens)  # one prompt step of seconds

threading.Thread(target=decode, name="shardchat-engine", daemon=True).start()
decoding.wait()
leave_if_llama_still_runs(7)  # the window closed while the engine decodes
print("not reached", flush=True)
"""


def test_closing_while_the_engine_is_inside_llama_cpp_leaves_at_once() -> None:
    """The process ends with the window's exit code, without finalisers freeing the model
    under the engine thread and without waiting for its step to finish."""
    done = subprocess.run(
        [sys.executable, "-c", LEAVING_MID_STEP], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 7, done.stderr[-500:]
    assert "not reached" not in done.stdout
