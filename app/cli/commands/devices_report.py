"""`shardchat info --devices`: the backends llama.cpp loaded, its devices, the GPU it uses.

What a user (or a support call) reads when ShardChat does not use their GPU:
every backend module with what became of it (loaded, or skipped and why), the
CPU variant chosen for this CPU, each ggml device, and the GPU a model load
offloads to. ggml starts in this process: nothing is planned afterwards.
"""

from __future__ import annotations

import argparse
import json

from app.screen_text.units import format_bytes
from engine.llama import backends
from engine.llama.ggml_devices import GgmlDevice, offload_devices, probe_devices
from engine.machine.hardware import llama_build_id


def run_devices(args: argparse.Namespace) -> int:
    report = backends.start_ggml()
    devices, failure = probe_devices()
    used = offload_devices(devices)
    if args.json:
        print(json.dumps(_as_dict(report, devices, used, failure), indent=2))
        return 0
    print(f"llama.cpp      {llama_build_id()}")
    print(*report.lines(), sep="\n")
    print("devices:" if devices else f"devices: none ({failure})")
    for device in devices:
        print(f"  {_device_line(device)}")
    if used:
        print("GPU used       " + ", ".join(f"{d.name} ({d.description})" for d in used))
    else:
        print(f"GPU used       none: {report.why_no_gpu()}")
    return 0


def _device_line(device: GgmlDevice) -> str:
    free, total = format_bytes(device.memory_free_bytes), format_bytes(device.memory_total_bytes)
    memory = f"{free} free of {total}" if device.memory_total_bytes else "memory unknown"
    where = f", PCI {device.device_id}" if device.device_id else ""
    kind = device.type.name
    return f"{device.name:<10} {kind:<6} {device.backend:<7} {device.description} ({memory}{where})"


def _as_dict(
    report: backends.BackendReport,
    devices: tuple[GgmlDevice, ...],
    used: tuple[GgmlDevice, ...],
    failure: str | None,
) -> dict[str, object]:
    return {
        "llama_build": llama_build_id(),
        "module_folder": report.folder,
        "loadable_modules": report.loadable,
        "cpu_variant": report.cpu_variant,
        "modules": [
            {
                "file": m.file,
                "backend": m.backend,
                "variant": m.variant,
                "loaded": m.loaded,
                "devices": list(m.devices),
                "note": m.note,
            }
            for m in report.modules
        ],  # fmt: skip
        "devices": [
            {
                "name": d.name,
                "type": d.type.name,
                "backend": d.backend,
                "description": d.description,
                "device_id": d.device_id,
                "memory_free_bytes": d.memory_free_bytes,
                "memory_total_bytes": d.memory_total_bytes,
            }
            for d in devices
        ],  # fmt: skip
        "devices_failure": failure,
        "gpu_used": [d.name for d in used],
        "why_no_gpu": None if used else report.why_no_gpu(),
    }
