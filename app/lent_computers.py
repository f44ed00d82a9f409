"""The lent computers a load may use now: each stored one probed, reached, and given a budget.

A stored remote (`shardchat devices`) is only a promise: before a model is split onto
it, its server is probed again (it may have stopped sharing, or be busy with another
computer), an ssh:// one through a forward that stays open while the model uses it.
The ones that fail are said, one line each, and left out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from app.stores.profile_store import ProfileStore
from engine.remote.addresses import parse_address
from engine.remote.link_measure import LinkFigures
from engine.remote.remote_speed import RemoteSpeed
from engine.remote.rpc_probe import RemoteError, probe
from engine.remote.ssh_forward import SshForward

REMOTE_SHARE = 0.9  # of a lent device's free memory: the rest is the lender's margin


@dataclass(frozen=True)
class ReachedComputer:
    address: str  # as stored
    endpoint: str  # host:port that reaches its RPC server from here (a forward's, for ssh)
    budget_bytes: int
    link: LinkFigures | None  # as measured when it was added
    speed: RemoteSpeed | None


def stored_computers() -> list[ReachedComputer]:
    """Every stored lent computer as it was when added, not contacted: what `plan --lent`
    plans with (each named by its address, its budget from its last probe)."""
    with ProfileStore() as store:
        stored = store.remotes.all()
    return [
        ReachedComputer(
            machine.address,
            machine.address,
            machine.budget_bytes or int(machine.devices[0].free_bytes * REMOTE_SHARE),
            machine.link,
            machine.speed,
        )
        for machine in stored
        if machine.devices
    ]


@contextlib.contextmanager
def reached_computers(say: Callable[[str], None]) -> Iterator[list[ReachedComputer]]:
    """Every stored lent computer that answers now, reachable for as long as the block runs
    (ssh forwards close after it); `say` gets a line for each one left out."""
    with ProfileStore() as store:
        stored = store.remotes.all()
    with contextlib.ExitStack() as forwards:
        reached = []
        for machine in stored:
            address = parse_address(machine.address)
            try:
                host, port = address.host, address.rpc_port
                if address.through_ssh:
                    forward = forwards.enter_context(SshForward(address, machine.ssh_options))
                    host, port = "127.0.0.1", forward.open()
                found = probe(host, port)
            except RemoteError as exc:
                say(f"not using {machine.address}: {exc}")
                continue
            free = sum(device.free_bytes for device in found.devices[:1])  # one device a server
            budget = machine.budget_bytes or int(free * REMOTE_SHARE)
            reached.append(
                ReachedComputer(
                    machine.address, f"{host}:{port}", budget, machine.link, machine.speed
                )
            )
        yield reached
