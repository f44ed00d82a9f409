"""The names of the described machines shipped with ShardChat, without their table.

Every command's parser names them in `plan --hardware`'s help, so `shardchat --help`
and the window's start would import engine.machine.described_machines (20 ms: the table
and the profile types behind it) only for the names; the shipped files say them.
"""

from __future__ import annotations

from importlib.resources import files


def shipped_names() -> tuple[str, ...]:
    """The described machines' names, sorted: one engine/machine/described/NAME.json each."""
    folder = files("engine.machine") / "described"
    return tuple(
        sorted(f.name[: -len(".json")] for f in folder.iterdir() if f.name.endswith(".json"))
    )
