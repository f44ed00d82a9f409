"""This machine's profile for the benchmarks that plan: the stored one, else one measured now.

Why measure rather than stop: on a fresh machine `make bench` is often the first thing
run, and a benchmark that ends in "no profile is stored" (once a traceback) measures
nothing. The profile measured here is stored as `shardchat profile` stores it, so the
next run, the window and `shardchat chat --vram` plan with the same figures.
"""

from __future__ import annotations

import sys

from app.stores.profile_store import ProfileStore
from engine.machine.hardware import probe_hardware
from engine.machine.profile import Profile, ProfileMode
from engine.profiling.profiler import Profiler

MEASURE_MODES = [mode.value for mode in (ProfileMode.FAST, ProfileMode.SMOKE)]


def profile_for_bench(mode: str = ProfileMode.FAST.value) -> Profile:
    """The stored profile of this machine and llama.cpp build, else one measured in `mode`
    (fast: about a minute on 2 cores; smoke: seconds, coarse figures) and stored."""
    hardware = probe_hardware()
    with ProfileStore() as store:
        stored = store.latest(hardware.fingerprint(), hardware.llama_build)
        if stored is not None:
            return stored
        print(
            f"no profile is stored for this machine: measuring a {mode} one first, as "
            f"`shardchat profile --{mode}` does, and storing it",
            file=sys.stderr,
            flush=True,
        )
        profile = Profiler(ProfileMode(mode), hardware=hardware).run()
        store.save(profile)
    return profile
