"""`shardchat chats`: what it accepts (app.cli.commands.chats_command runs it)."""

from __future__ import annotations

import argparse

from app.cli.arguments.run_later import run_later


def add_chats_command(commands: argparse._SubParsersAction) -> None:
    chats = commands.add_parser(
        "chats",
        help="list, search or export saved conversations",
        usage="shardchat chats [--json] [search TEXT [--json] | export ID [--out FILE]]",
        description="List the saved conversations (newest first), search them, or export "
        "one as Markdown.",
    )
    chats.add_argument("--json", action="store_true", help="print the list as JSON")
    chats.set_defaults(
        command="chats", run=run_later("app.cli.commands.chats_command", "run_chats_list")
    )
    actions = chats.add_subparsers(title="actions", metavar="ACTION")
    search = actions.add_parser(
        "search",
        help="list the conversations whose title or messages contain TEXT",
        description="List the conversations whose title or any message contains TEXT "
        "(ignoring case), newest first.",
    )
    search.add_argument("text", metavar="TEXT", help="the text to look for")
    search.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print the list as JSON"
    )
    search.set_defaults(run=run_later("app.cli.commands.chats_command", "run_chats_search"))
    export = actions.add_parser(
        "export",
        help="print a conversation as Markdown, or write it to a file",
        description="Print conversation ID as Markdown (images by name only), or write it "
        "to FILE with --out; the file is written whole or not at all.",
    )
    export.add_argument("id", type=int, metavar="ID", help="the conversation's id (see: chats)")
    export.add_argument("--out", "-o", metavar="FILE", help="write here instead of stdout")
    export.set_defaults(run=run_later("app.cli.commands.chats_command", "run_chats_export"))
