"""A model load on a worker thread while the main thread runs Python, against the same load
alone, at Python's default switch interval and at the window's (app.interpreter_sharing).

    .venv/bin/python bench/load_beside_python.py [--model PATH] [--runs 3]

llama.cpp logs each line of a load through our Python callback (engine.llama.log_capture);
each needs the interpreter, which a busy thread hands over only after the switch interval.
Each interval runs in a fresh process (the interval is the process's), loads alone and
beside a main thread doing pure Python, alternating; the figures are medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, threading, time
import llama_cpp
from engine.llama import log_capture
from engine.llama.backends import start_ggml
start_ggml()
log_capture.install()
sys.setswitchinterval(float(sys.argv[2]))
took = {"alone": [], "beside": []}
def load(into):
    started = time.perf_counter()
    llama_cpp.Llama(model_path=sys.argv[1], n_ctx=4096, verbose=False)
    into.append(time.perf_counter() - started)
for _ in range(int(sys.argv[3])):
    for busy in (False, True):
        worker = threading.Thread(target=load, args=(took["beside" if busy else "alone"],))
        worker.start()
        while busy and worker.is_alive():
            sum(i * i for i in range(1000))  # Python work: imports, layout
        worker.join()
print(json.dumps(took))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF model (default: the embedded default model)")
    parser.add_argument("--runs", type=int, default=3, help="loads of each kind per interval")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from app.interpreter_sharing import SWITCH_INTERVAL_S
    from engine.model.default_model import default_model_path

    model = args.model or str(default_model_path())
    print(f"{'switch interval':18}{'load alone':>12}{'beside Python':>16}{'ratio':>8}")
    for interval in (sys.getswitchinterval(), SWITCH_INTERVAL_S):
        command = [sys.executable, "-c", CHILD, model, str(interval), str(args.runs)]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
        took = json.loads(done.stdout.strip().splitlines()[-1])
        alone, beside = (statistics.median(took[key]) for key in ("alone", "beside"))
        print(f"{interval * 1000:>14.2f} ms{alone * 1000:>10.0f} ms{beside * 1000:>13.0f} ms"
              f"{beside / alone:>7.1f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
