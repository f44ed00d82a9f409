"""The computers lent to this one (`shardchat devices`), kept in the profile database.

A remote is stored under its canonical address (engine.remote.addresses) with what
its last probe found: the protocol version and each device's memory, and the ssh
settings it was added with (an identity file), used again to reach it, the link as
measured then (round trip, bandwidth both ways), its device's speed as measured then
(engine.remote.remote_speed, added by m004), and the budget the user gave it:
llama.cpp's RPC server has no memory limit of its own, so how much of a lent device
ShardChat fills is decided here. The table is the profile store's migration m003; this
module holds its queries.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, astuple, dataclass
from datetime import datetime, timezone
from typing import Any

from app.stores.sqlite_file import transaction
from engine.known_fields import known_fields
from engine.remote.link_measure import LinkFigures
from engine.remote.remote_speed import RemoteSpeed
from engine.remote.rpc_probe import RemoteDevice, RemoteServer


def m003_remote_machines(conn: sqlite3.Connection) -> None:
    """Computers lent to this one, by address, with their last probe."""
    conn.execute(
        "CREATE TABLE remote_machines ("
        " address TEXT PRIMARY KEY,"
        " added_at TEXT NOT NULL,"
        " probed_at TEXT NOT NULL,"
        " protocol TEXT NOT NULL,"
        " devices TEXT NOT NULL,"  # JSON: [{"index", "free_bytes", "total_bytes"}]
        " ssh_options TEXT NOT NULL DEFAULT '[]',"  # JSON: the -o settings it was added with
        " budget_bytes INTEGER,"  # what ShardChat may fill; NULL: a share of what is free
        " round_trip_s REAL, upload_bytes_per_s REAL, download_bytes_per_s REAL)"  # the link
    )
    conn.execute("PRAGMA user_version = 3")


def m004_remote_speed(conn: sqlite3.Connection) -> None:
    """Each lent computer's device speed, measured when it was added (JSON; NULL: not
    measured, as for a remote added by an older ShardChat)."""
    conn.execute("ALTER TABLE remote_machines ADD COLUMN speed TEXT")
    conn.execute("PRAGMA user_version = 4")


@dataclass(frozen=True)
class RemoteMachine:
    address: str
    added_at: str
    probed_at: str
    protocol: str
    devices: tuple[RemoteDevice, ...]
    ssh_options: tuple[str, ...] = ()
    budget_bytes: int | None = None
    link: LinkFigures | None = None  # measured when it was added
    speed: RemoteSpeed | None = None  # likewise


class RemoteMachines:
    """Queries on the remote_machines table of one open profile store connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def save(
        self,
        address: str,
        probed: RemoteServer,
        link: LinkFigures | None = None,
        ssh_options: tuple[str, ...] = (),
        budget_bytes: int | None = None,
        speed: RemoteSpeed | None = None,
    ) -> RemoteMachine:
        """Add a remote or refresh its probe (its first `added_at` stays)."""
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        devices = json.dumps([vars(device) for device in probed.devices])
        protocol = ".".join(str(part) for part in probed.version)
        with transaction(self._conn):
            self._conn.execute(
                "INSERT INTO remote_machines"
                f" ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (address) DO UPDATE SET probed_at = excluded.probed_at,"
                " protocol = excluded.protocol, devices = excluded.devices,"
                " ssh_options = excluded.ssh_options, budget_bytes = excluded.budget_bytes,"
                " round_trip_s = excluded.round_trip_s,"
                " upload_bytes_per_s = excluded.upload_bytes_per_s,"
                " download_bytes_per_s = excluded.download_bytes_per_s,"
                " speed = excluded.speed",
                (
                    address,
                    now,
                    now,
                    protocol,
                    devices,
                    json.dumps(list(ssh_options)),
                    budget_bytes,
                    *(astuple(link) if link else (None, None, None)),
                    json.dumps(asdict(speed)) if speed else None,
                ),  # fmt: skip
            )
        found = self.get(address)
        assert found is not None
        return found

    def get(self, address: str) -> RemoteMachine | None:
        row = self._conn.execute(
            f"SELECT {_COLUMNS} FROM remote_machines WHERE address = ?", (address,)
        ).fetchone()
        return _machine(row) if row else None

    def all(self) -> list[RemoteMachine]:
        rows = self._conn.execute(f"SELECT {_COLUMNS} FROM remote_machines ORDER BY added_at")
        return [_machine(row) for row in rows]

    def remove(self, address: str) -> bool:
        """Forget a remote; False when there was none at that address."""
        with transaction(self._conn):
            gone = self._conn.execute("DELETE FROM remote_machines WHERE address = ?", (address,))
        return gone.rowcount > 0


_COLUMNS = (
    "address, added_at, probed_at, protocol, devices, ssh_options, budget_bytes,"
    " round_trip_s, upload_bytes_per_s, download_bytes_per_s, speed"
)


def _machine(row: tuple[Any, ...]) -> RemoteMachine:
    address, added_at, probed_at, protocol, devices, ssh_options, budget, *link, speed = row
    return RemoteMachine(
        address,
        added_at,
        probed_at,
        protocol,
        tuple(RemoteDevice(**device) for device in json.loads(devices)),
        tuple(json.loads(ssh_options)),
        budget,
        LinkFigures(*link) if link[0] is not None else None,
        RemoteSpeed(**known_fields(RemoteSpeed, json.loads(speed))) if speed else None,
    )
