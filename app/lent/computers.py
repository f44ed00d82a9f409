"""The computers lent to this one: kept, and reached when a load may use them.

Adding one (`shardchat devices add`, the VRAM panel's "Add computer…") probes its RPC
server the way it will be reached (an ssh:// one through an SSH forward), measures
the link and the device's speed through it, and keeps it in the profile database.

A kept remote is only a promise: before a model is split onto it, its server is probed
again (it may have stopped sharing, or be busy with another computer), an ssh:// one
through a forward that stays open while the model uses it. The ones that fail are
said, one line each, and left out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from app.stores.profile_store import ProfileStore
from app.stores.remote_machines import RemoteMachine
from engine.errors import BadInputError
from engine.remote.addresses import RemoteAddress, parse_address
from engine.remote.lent_budget import REMOTE_SHARE
from engine.remote.link_measure import LinkFigures, measure_link
from engine.remote.remote_speed import RemoteSpeed
from engine.remote.rpc_probe import RemoteError, RemoteServer, RpcSession, probe
from engine.remote.ssh_forward import SshForward

GIB = 2**30


@dataclass(frozen=True)
class ReachedComputer:
    address: str  # as stored
    endpoint: str  # host:port that reaches its RPC server from here (a forward's, for ssh)
    budget_bytes: int
    link: LinkFigures | None  # as measured when it was added
    speed: RemoteSpeed | None


def kept_machines() -> list[RemoteMachine]:
    with ProfileStore() as store:
        return store.remotes.all()


def add_lent_computer(
    address_text: str,
    ssh_options: Sequence[str] = (),
    budget_bytes: int | None = None,
    rpc_port: int | None = None,
    say: Callable[[str], None] = lambda _line: None,
) -> RemoteMachine:
    """Check, measure and keep the computer at `address_text` (again: its figures are
    renewed); RemoteError or BadInputError, one line, when it cannot be used."""
    address = parse_address(address_text, rpc_port)
    probed, link, speed = probe_address(address, list(ssh_options), say)
    memory = sum(device.total_bytes for device in probed.devices[:1])
    if budget_bytes is not None and budget_bytes > memory:
        raise BadInputError(
            f"a {budget_bytes / GIB:.1f} GiB budget is more than {address} has "
            f"({memory / GIB:.1f} GiB)"
        )
    with ProfileStore() as store:
        return store.remotes.save(
            str(address), probed, link, tuple(ssh_options), budget_bytes, speed
        )


def remove_lent_computer(address_text: str) -> str:
    """Forget the computer at `address_text`; its canonical address."""
    address = str(parse_address(address_text))
    with ProfileStore() as store:
        if not store.remotes.remove(address):
            raise BadInputError(f"no computer at {address} (see: shardchat devices)")
    return address


def probe_address(
    address: RemoteAddress, ssh_options: list[str], say: Callable[[str], None]
) -> tuple[RemoteServer, LinkFigures, RemoteSpeed]:
    """The remote's RPC server, probed the way it will be reached, its link and its
    device's speed measured."""
    if not address.through_ssh:
        return _probed(address.host, address.rpc_port, say)
    with SshForward(address, ssh_options) as forward:
        port = forward.open()
        try:
            found, link, speed = _probed("127.0.0.1", port, say)
        except RemoteError as exc:
            raise RemoteError(
                f"through ssh to {address.host}, port {address.rpc_port} there: {exc} "
                "(is `shardchat share` running on it?)"
            ) from None
    server = RemoteServer(address.host, address.rpc_port, found.version, found.devices)
    return server, link, speed


def _probed(
    host: str, port: int, say: Callable[[str], None]
) -> tuple[RemoteServer, LinkFigures, RemoteSpeed]:
    """The probe and the link on our own connection; then, that one closed (a server
    serves one client at a time), the speed through llama.cpp's client in a child."""
    with RpcSession.open(host, port) as session:
        server, link = session.server, measure_link(session)
    say(f"Measuring the speed of {host}:{port}...")
    from engine.profiling.remote_steps import measured_speed  # the profiler's models

    return server, link, measured_speed(f"{host}:{port}")


def stored_computers() -> list[ReachedComputer]:
    """Every stored lent computer as it was when added, not contacted: what `plan --lent`
    plans with (each named by its address, its budget from its last probe)."""
    return [
        ReachedComputer(
            machine.address,
            machine.address,
            machine.budget_bytes or int(machine.devices[0].free_bytes * REMOTE_SHARE),
            machine.link,
            machine.speed,
        )
        for machine in kept_machines()
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
