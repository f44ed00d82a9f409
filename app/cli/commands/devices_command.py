"""`shardchat devices`: the other computers lent to this one (add, list, remove).

Adding one (app.lent.computers, as the VRAM panel's "Add computer…" does) probes its
RPC server first, with a connection of our own: llama.cpp's client aborts the process
on a server it cannot use, so nothing unprobed is ever kept. An ssh:// address is
probed through an SSH forward, as it will be used. Then the link and the device's speed
are measured through it, as the planner costs a split with them.
"""

from __future__ import annotations

import argparse
import json
import sys

from app.lent.computers import (
    add_lent_computer,
    kept_machines,
    remove_lent_computer,
)
from app.stores.remote_machines import RemoteMachine


def run_devices_add(args: argparse.Namespace) -> int:
    kept = add_lent_computer(args.address, args.ssh_option, args.budget, args.rpc_port, _say)
    print(f"Added {kept.address}  ({_facts(kept)})")
    _print_devices(kept)
    return 0


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_devices_list(args: argparse.Namespace) -> int:
    machines = kept_machines()
    if args.json:
        print(json.dumps([_as_json(machine) for machine in machines], indent=2))
    elif not machines:
        print("No other computers. Add one with: shardchat devices add ssh://USER@HOST")
    for machine in [] if args.json else machines:
        print(f"{machine.address}  ({_facts(machine)})")
        _print_devices(machine)
    return 0


def run_devices_remove(args: argparse.Namespace) -> int:
    print(f"Removed {remove_lent_computer(args.address)}.", file=sys.stdout)
    return 0


def _facts(machine: RemoteMachine) -> str:
    facts = [f"protocol {machine.protocol}", f"checked {machine.probed_at}"]
    if machine.link is not None:
        facts.append(machine.link.describe())
    if machine.speed is not None:
        facts.append(machine.speed.describe())
    if machine.budget_bytes is not None:
        facts.append(f"budget {machine.budget_bytes / 2**30:.2f} GiB")
    return ", ".join(facts)


def _print_devices(machine: RemoteMachine) -> None:
    for device in machine.devices:
        free, total = device.free_bytes / 2**30, device.total_bytes / 2**30
        print(f"  device {device.index}: {free:.1f} GiB free of {total:.1f} GiB")


def _as_json(machine: RemoteMachine) -> dict[str, object]:
    return {
        "address": machine.address,
        "protocol": machine.protocol,
        "probed_at": machine.probed_at,
        "budget_bytes": machine.budget_bytes,
        "link": None if machine.link is None else vars(machine.link),
        "speed": None if machine.speed is None else vars(machine.speed),
        "devices": [vars(device) for device in machine.devices],
    }
