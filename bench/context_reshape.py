"""What making the shared KV pool costs: the context re-created on the loaded weights, beside
loading the model with the pool from the start, measured side by side in one run.

The window loads a model without the pool the API's clients and summary jobs share
(app.model_lifecycle.load_planning.ContextShape); the first such activity re-creates the
context with it (LoadedModel.reshape). This prints, per round, the load without the
pool, the re-creation with it, and a whole load with it, then the medians and the
re-creation's share of a load.

    .venv/bin/python bench/context_reshape.py [--model PATH] [--gpu-layers N] [--rounds 5]

Figures: README, "VRAM for weights, not idle cells".
"""

from __future__ import annotations

import argparse
import statistics
import time

from engine.llama.load_params import DEFAULT_PARALLEL, DEFAULT_SHARED_CELLS, LoadParams
from engine.model.default_model import default_model_path
from engine.runtime.loaded_model import LoadedModel, load_model


def _timed_load(params: LoadParams) -> tuple[float, LoadedModel]:
    started = time.perf_counter()
    model = load_model(params)
    return time.perf_counter() - started, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(default_model_path()))
    parser.add_argument("--gpu-layers", type=int, default=0)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    alone = LoadParams(args.model, n_ctx=args.ctx, n_gpu_layers=args.gpu_layers, n_ctx_shared=0)
    pooled = alone.with_changes(n_ctx_shared=DEFAULT_SHARED_CELLS)
    loads, reshapes, pooled_loads = [], [], []
    for round_ in range(args.rounds):
        seconds, model = _timed_load(alone)
        loads.append(seconds)
        reshapes.append(model.reshape(DEFAULT_PARALLEL, DEFAULT_SHARED_CELLS))
        model.close()
        seconds, model = _timed_load(pooled)
        pooled_loads.append(seconds)
        model.close()
        print(
            f"round {round_ + 1}: load without pool {loads[-1]:.3f} s, pool made "
            f"{reshapes[-1]:.3f} s, load with pool {pooled_loads[-1]:.3f} s"
        )
    load, reshape, pooled_load = (statistics.median(x) for x in (loads, reshapes, pooled_loads))
    print(
        f"median: load without pool {load:.3f} s, pool of {DEFAULT_SHARED_CELLS} cells made "
        f"{reshape:.3f} s ({reshape / pooled_load:.2f}x a load with it, {pooled_load:.3f} s)"
    )


if __name__ == "__main__":
    main()
