"""`shardchat devices`: what it accepts (app.cli.commands.devices_command runs it)."""

from __future__ import annotations

import argparse

from app.cli.arguments.arg_types import positive_int, size
from app.cli.arguments.run_later import run_later
from engine.remote.lent_budget import REMOTE_SHARE


def add_devices_command(commands: argparse._SubParsersAction) -> None:
    devices = commands.add_parser(
        "devices",
        help="other computers lent to this one (shardchat share on them): add, list, remove",
        description="The computers whose devices ShardChat may use besides this one's. Run "
        "`shardchat share` on the other computer first.",
    )
    devices.add_argument("--json", action="store_true", help="print the list as JSON")
    devices.set_defaults(
        command="devices", run=run_later("app.cli.commands.devices_command", "run_devices_list")
    )
    actions = devices.add_subparsers(title="actions", metavar="ACTION")
    add = actions.add_parser(
        "add",
        help="check a lent computer and keep it",
        description="Probe the RPC server at ADDRESS (tcp://HOST:PORT, or ssh://USER@HOST "
        "through an SSH forward with your own SSH key) and keep it with its devices' memory.",
    )
    add.add_argument("address", metavar="ADDRESS", help="tcp://HOST:PORT or ssh://USER@HOST")
    add.add_argument(
        "--rpc-port",
        type=positive_int,
        default=None,
        help="the RPC server's port on an ssh:// host (default 50052)",
    )
    add.add_argument(
        "--ssh-option",
        action="append",
        default=[],
        metavar="OPTION",
        help="an ssh -o setting for the forward (e.g. IdentityFile=~/.ssh/lab); repeatable",
    )
    add.add_argument(
        "--budget",
        type=size,
        default=None,
        metavar="SIZE",
        help=f"how much of its memory ShardChat may fill (e.g. 12GiB; default: "
        f"{REMOTE_SHARE * 100:.0f}%% of what is free when a model is loaded)",
    )
    add.set_defaults(run=run_later("app.cli.commands.devices_command", "run_devices_add"))
    remove = actions.add_parser(
        "remove", help="forget a lent computer", description="Forget the computer at ADDRESS."
    )
    remove.add_argument("address", metavar="ADDRESS")
    remove.set_defaults(run=run_later("app.cli.commands.devices_command", "run_devices_remove"))
