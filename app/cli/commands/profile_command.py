"""`shardchat profile`: measure this machine, show the stored profile, export or import one.

A run is stored only when it finishes; Ctrl-C or a crash leaves the previous
complete profile as it was. A run that other programs disturbed too much is
not stored either: one line says so and the exit code is 1 (the input was
fine; the machine was not fit to measure). `--show` reads the store and never
measures; a profile measured while the machine was busy shows its flag.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from app.machine_profile import this_machine_profile
from app.profiling_job import too_busy_message
from app.screen_text.profile_summary import render_profile
from app.screen_text.units import format_bytes
from app.stores.profile_store import ProfileStore
from engine.errors import BadInputError, ShardChatError
from engine.machine.hardware import probe_hardware
from engine.machine.hardware_info import HardwareInfo
from engine.machine.profile import Profile, ProfileMode
from engine.profiling.profiler import ProfileProgress, Profiler


def run_profile(args: argparse.Namespace) -> int:
    with ProfileStore() as store:
        if store.recovered_from is not None:
            moved = store.recovered_from
            print(f"shardchat: the profile store was unreadable; moved to {moved}", file=sys.stderr)
        if args.import_file:
            return _print(store.import_json(Path(args.import_file)), args.json, "imported")
        hardware = probe_hardware()
        if args.show or args.export:
            stored = this_machine_profile(hardware, store)
            if stored is None:
                raise BadInputError("no profile is stored for this machine; run shardchat profile")
            if args.export:
                path = store.export_json(stored, Path(args.export))
                print(f"exported the profile of {stored.created_at} to {path}")
                return 0
            return _print(stored, args.json, "stored")
        profile = _measure(hardware, ProfileMode(args.mode))
        refused = too_busy_message(profile)
        if refused is not None:
            raise ShardChatError(refused)  # exit 1: measured, but not fit to keep
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
