"""This machine's profile: the newest one stored for its fingerprint and llama.cpp build.

A profile measured on other hardware, or under another llama.cpp build (whose
kernels ran at other speeds), would plan this machine wrong, so every place
that plans or reports "the profile here" asks this one function, with the
same key, rather than writing the store query out again.
"""

from __future__ import annotations

from app.stores.profile_store import ProfileStore
from engine.machine.hardware import probe_hardware
from engine.machine.hardware_info import HardwareInfo
from engine.machine.profile import Profile


def this_machine_profile(
    hardware: HardwareInfo | None = None,
    store: ProfileStore | None = None,
    any_build: bool = False,
) -> Profile | None:
    """The newest readable profile of `hardware` (default: probed now) in `store` (default:
    the user's own, opened for this question), or None when it was never profiled.
    `any_build`: one measured under another llama.cpp build counts too, for what does not
    depend on the kernels' speed (how long profiling took here last time)."""
    hardware = hardware or probe_hardware()
    if store is None:
        with ProfileStore() as opened:
            return this_machine_profile(hardware, opened, any_build)
    build = None if any_build else hardware.llama_build
    return store.latest(hardware.fingerprint(), build)
