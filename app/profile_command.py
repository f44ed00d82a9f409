"""`shardchat profile`: measure this machine, show the stored profile, export or import one.

A run is stored only when it finishes; Ctrl-C or a crash leaves the previous
complete profile as it was. `--show` reads the store and never measures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from app.profile_store import ProfileStore
from app.units import format_bytes
from engine.errors import BadInputError
from engine.hardware import HardwareInfo, probe_hardware
from engine.profile import KernelShape, Profile, ProfileMode
from engine.profiler import ProfileProgress, Profiler

_SUMMARY_TOKENS = (1, 16, 256)


def add_profile_command(commands: argparse._SubParsersAction) -> None:
    profile = commands.add_parser(
        "profile",
        help="measure this machine for the planner (or show, export, import a profile)",
        description="Measure this machine with llama.cpp's own kernels and store the profile "
        "the planner uses. --fast is what the first-launch wizard runs (about a minute on 2 "
        "cores); --full measures more; --smoke takes seconds and only checks that it works.",
    )
    action = profile.add_mutually_exclusive_group()
    for flag, mode in (("--fast", "fast"), ("--full", "full"), ("--smoke", "smoke")):
        action.add_argument(flag, dest="mode", action="store_const", const=mode)
    action.add_argument("--show", action="store_true", help="print the stored profile")
    action.add_argument("--export", metavar="FILE", help="write the stored profile to FILE")
    action.add_argument("--import", dest="import_file", metavar="FILE", help="store a profile")
    profile.add_argument("--json", action="store_true", help="print the profile as JSON")
    profile.set_defaults(command="profile", run=run_profile, mode="fast")


def run_profile(args: argparse.Namespace) -> int:
    with ProfileStore() as store:
        if store.recovered_from is not None:
            moved = store.recovered_from
            print(f"shardchat: the profile store was unreadable; moved to {moved}", file=sys.stderr)
        if args.import_file:
            return _print(store.import_json(Path(args.import_file)), args.json, "imported")
        hardware = probe_hardware()
        if args.show or args.export:
            stored = store.latest(hardware.fingerprint(), hardware.llama_build)
            if stored is None:
                raise BadInputError("no profile is stored for this machine; run shardchat profile")
            if args.export:
                path = store.export_json(stored, Path(args.export))
                print(f"exported the profile of {stored.created_at} to {path}")
                return 0
            return _print(stored, args.json, "stored")
        profile = _measure(hardware, ProfileMode(args.mode))
        saved = store.save(profile)
        size = format_bytes(saved.size_bytes)
        return _print(profile, args.json, f"stored in {store.path} ({size})")


def _measure(hardware: HardwareInfo, mode: ProfileMode) -> Profile:
    label = f"profiling ({mode.value})"
    with tqdm(total=1, unit="step", desc=label, file=sys.stderr, disable=None, leave=False) as bar:

        def show(progress: ProfileProgress) -> None:
            bar.total = progress.total
            bar.n = progress.step
            bar.set_postfix_str(progress.label)

        return Profiler(mode, hardware=hardware, progress=show).run()


def _print(profile: Profile, as_json: bool, where: str) -> int:
    if as_json:
        print(json.dumps(profile.to_dict(), indent=1, sort_keys=True))
    else:
        print(render_profile(profile))
        print(where)
    return 0


def render_profile(profile: Profile) -> str:
    """A short human summary: throughput by quant at the best thread count, bandwidths, GPU."""
    described = " (described, not measured)" if profile.is_described else ""
    token_counts = " / ".join(map(str, _SUMMARY_TOKENS))
    lines = [
        f"profile        {profile.mode.value}{described}, {profile.created_at}, "
        f"took {profile.duration_s:.1f} s",
        f"machine        {_machine(profile)}",
        f"llama.cpp      {profile.llama_build}",
        f"GFLOP/s        at the best thread count, for {token_counts} tokens",
    ]
    lines += [f"  {line}" for line in _throughput_lines(profile)]
    lines += [
        f"DRAM read      {profile.dram_read_gbps:.1f} GB/s",
        f"repacking      {_repack(profile)}",
        f"fixed costs    {_fixed(profile)}",
        f"attention      {_attention(profile)}",
        f"GPU            {_gpu(profile)}",
        f"unusable       {_unusable(profile)}",
    ]
    return "\n".join(lines)


def _unusable(profile: Profile) -> str:
    return "; ".join(f"{u.config}: {u.reason}" for u in profile.unusable) or "none"


def _machine(profile: Profile) -> str:
    hardware = profile.hardware
    if not hardware:
        return profile.description or f"{profile.physical_cores} cores"
    cpu, memory = hardware.get("cpu", {}), hardware.get("memory", {})
    return (
        f"{cpu.get('model', '?')}, {cpu.get('physical_cores', '?')} cores, "
        f"{format_bytes(memory.get('total_bytes', 0))} RAM"
    )


def _throughput_lines(profile: Profile) -> list[str]:
    lines = []
    for shape in KernelShape:
        for quant in sorted({k.quant for k in profile.cpu_kernels if k.shape is shape}):
            points = [k for k in profile.cpu_kernels if k.shape is shape and k.quant == quant]
            best = max({k.threads for k in points}, key=lambda t: _peak(points, t))
            cells = []
            for n_tokens in _SUMMARY_TOKENS:
                match = [k for k in points if k.threads == best and k.n_tokens == n_tokens]
                cells.append(f"{match[0].gflops:7.1f}" if match else "      -")
            lines.append(f"{shape.value:6}{quant:6} {best:>3} threads {' /'.join(cells)}")
    return lines


def _peak(points: list, threads: int) -> float:
    return max(k.gflops for k in points if k.threads == threads)


def _repack(profile: Profile) -> str:
    repack = profile.repack
    if repack is None or not repack.works:
        return f"not usable ({repack.detail if repack else 'not measured'})"
    verdict = "pays off" if repack.pays_off else "does not pay off"
    return f"works, {repack.speedup:.2f}x for Q4_0 ({verdict})"


def _fixed(profile: Profile) -> str:
    top = max(profile.cpu_call_overhead_s, default=None)
    if top is None:
        return "not measured"
    call = 1e6 * profile.cpu_call_overhead_s[top]
    per_block = 1e6 * profile.cpu_layer_overhead_s.get(top, 0.0)
    return f"{call:.1f} µs per call, {per_block:.1f} µs per block ({top} threads)"


def _attention(profile: Profile) -> str:
    single = [p for p in profile.cpu_attention if p.n_tokens == 1]
    if not single:
        return "not measured"
    point = max(single, key=lambda p: p.n_ctx)
    per_head_per_k = 1e6 * point.seconds_per_layer / point.n_head / point.n_ctx * 1000
    return f"{per_head_per_k:.2f} µs per head and block per 1k cached tokens (1-token step)"


def _gpu(profile: Profile) -> str:
    gpu = profile.gpu
    if gpu is not None:
        return (
            f"{gpu.name}, {format_bytes(gpu.vram_total_bytes)}, VRAM {gpu.memory_gbps:.0f} GB/s, "
            f"host->device {gpu.h2d_pinned_gbps:.1f} GB/s pinned, {gpu.h2d_pageable_gbps:.1f} "
            f"pageable, CPU at {100 * gpu.cpu_derate_under_copy:.0f}% during copies"
        )
    reason = profile.hardware.get("gpu_reason") if profile.hardware else None
    return f"none ({reason})" if reason else "none"
