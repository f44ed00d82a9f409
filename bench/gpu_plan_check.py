"""On a machine with an NVIDIA GPU: our plan against the best whole-layer offload, measured.

Writes a shape-true synthetic MoE model (Qwen3-30B-A3B shapes, Q4_0, random
weights), profiles the machine (fast), then at each VRAM budget loads the
model twice: under ShardChat's plan, and with the largest whole-layer
n_gpu_layers that fits the same budget (llama.cpp's usual offload). For each
it measures time to first token for a 1024-token prompt, decode tokens/s and
peak VRAM (NVML, this process), and prints them side by side.

Not yet run: no GPU has been lent to a session that could. bench/gpu_check.sh
carries and runs it.

    python3 bench/gpu_plan_check.py --folder /tmp/models [--budgets 2,4,8]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

from engine.machine.hardware import probe_hardware
from engine.machine.profile import ProfileMode
from engine.model.inventory import read_inventory
from engine.model.synthetic import write_synthetic_model
from engine.model.synthetic_spec import SyntheticSpec
from engine.planning.execution import load_params_for
from engine.planning.llama_placements import layer_offload_baseline
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan
from engine.profiling.profiler import Profiler
from engine.runtime.loaded_model import load_model

GIB = 1 << 30
PROMPT, DECODE = 1024, 64
MOE_30B = SyntheticSpec(
    "qwen3moe", n_layer=48, n_embd=2048, n_head=32, n_head_kv=4, head_dim=128, n_ff=6144,
    n_expert=128, n_expert_used=8, n_ff_expert=768, context_length=40960,
)  # fmt: skip


class PeakVram:
    """Samples this process's VRAM through NVML every 20 ms while running."""

    def __init__(self) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakVram:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.is_set():
            for process in self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle):
                if process.pid == os.getpid():
                    self.peak = max(self.peak, process.usedGpuMemory or 0)
            time.sleep(0.02)


def measure(params) -> tuple[float, float, int]:
    """(seconds to first token for the prompt, decode tokens/s, peak VRAM bytes)."""
    os.environ["GGML_OP_OFFLOAD_MIN_BATCH"] = str(params.op_offload_min_batch or 32)
    with PeakVram() as vram:
        model = load_model(params)
        try:
            model.llm.reset()
            tokens = [(7 * i + 3) % 32000 for i in range(PROMPT)]
            started = time.perf_counter()
            model.llm.eval(tokens)
            ttft = time.perf_counter() - started
            started = time.perf_counter()
            for i in range(DECODE):
                model.llm.eval([(11 * i + 5) % 32000])
            decode = DECODE / (time.perf_counter() - started)
        finally:
            model.close()
    return ttft, decode, vram.peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default="/tmp/shardchat-gpu-models")
    parser.add_argument("--budgets", default="2,4,8")
    args = parser.parse_args()
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "qwen3-30b-a3b-shapes-Q4_0.gguf"
    if not path.exists():
        write_synthetic_model(path, MOE_30B, "Q4_0")
    inventory = read_inventory(path)
    profile = Profiler(ProfileMode.FAST, hardware=probe_hardware()).run()
    print(f"gpu_plan_check: {path.name} ({inventory.file_bytes / GIB:.1f} GiB), prompt {PROMPT}")
    header = f"{'ours: TTFT s  tok/s  peak GiB':>30}  {'layers: TTFT s  tok/s  peak GiB':>32}"
    print(f"{'budget':>7}  {header}")
    for budget in (int(b) for b in args.budgets.split(",")):
        request = PlanRequest(budget * GIB, n_ctx=4096, prompt_tokens=PROMPT)
        ours = load_params_for(make_plan(inventory, profile, request), inventory, str(path))
        # what a user gets: -ngl N (the output layer and N - 1 blocks), ubatch 512, offload
        # from 32; load_params_for turns the plan into exactly that
        layers = load_params_for(
            layer_offload_baseline(inventory, profile, request), inventory, str(path)
        )
        a, b = measure(ours), measure(layers)
        print(
            f"{budget:>5}GB  {a[0]:>10.2f} {a[1]:>7.1f} {a[2] / GIB:>9.2f}"
            f"  {b[0]:>14.2f} {b[1]:>7.1f} {b[2] / GIB:>9.2f}"
            f"  (n_gpu_layers={layers.n_gpu_layers})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
