"""`shardchat profile`: what it accepts (app.cli.commands.profile_command runs it)."""

from __future__ import annotations

import argparse

from app.cli.arguments.run_later import run_later


def add_profile_command(commands: argparse._SubParsersAction) -> None:
    profile = commands.add_parser(
        "profile",
        help="measure this machine for the planner (or show, export, import a profile)",
        description="Measure this machine with llama.cpp's own kernels and store the profile "
        "the planner uses. --fast is what the first-launch wizard runs (56 s on a quiet "
        "2-core machine, 3 min 22 s on a busy one); --full measures more; --smoke takes "
        "seconds and only checks that it works.",
    )
    action = profile.add_mutually_exclusive_group()
    for flag, mode in (("--fast", "fast"), ("--full", "full"), ("--smoke", "smoke")):
        action.add_argument(flag, dest="mode", action="store_const", const=mode)
    action.add_argument("--show", action="store_true", help="print the stored profile")
    action.add_argument("--export", metavar="FILE", help="write the stored profile to FILE")
    action.add_argument("--import", dest="import_file", metavar="FILE", help="store a profile")
    profile.add_argument("--json", action="store_true", help="print the profile as JSON")
    profile.set_defaults(
        command="profile",
        run=run_later("app.cli.commands.profile_command", "run_profile"),
        mode="fast",
    )
