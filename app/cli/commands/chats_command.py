"""`shardchat chats`: the chat history from the command line (list, search, export).

The window and the terminal chat share one history (ChatStore, under
SHARDCHAT_HOME); this is how a headless user reads it back. Nothing here
loads a model.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from app.conversation.chat_export import conversation_markdown, export_conversation
from app.stores.chat_records import Conversation
from app.stores.chat_store import ChatStore


def run_chats_list(args: argparse.Namespace) -> int:
    with ChatStore() as store:
        _print_conversations(store, store.conversations(), args.json, "no saved conversations")
    return 0


def run_chats_search(args: argparse.Namespace) -> int:
    with ChatStore() as store:
        found = store.search(args.text)
        _print_conversations(store, found, args.json, f"no conversation contains {args.text!r}")
    return 0


def run_chats_export(args: argparse.Namespace) -> int:
    with ChatStore() as store:
        if args.out is None:
            sys.stdout.write(conversation_markdown(store, args.id))
            return 0
        written = export_conversation(store, args.id, Path(args.out))
    print(f"shardchat: wrote conversation {args.id} to {written}", file=sys.stderr)
    return 0


def _print_conversations(
    store: ChatStore, conversations: list[Conversation], as_json: bool, when_none: str
) -> None:
    """One row a conversation (or a JSON list); an empty list says so on stderr only."""
    counts = {c.id: len(store.messages(c.id, with_images=False)) for c in conversations}
    if as_json:
        rows = [
            {
                "id": c.id,
                "title": c.title,
                "created_at": c.created_at,
                "updated_at": c.updated_at,
                "messages": counts[c.id],
            }
            for c in conversations
        ]
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    if not conversations:
        print(when_none, file=sys.stderr)
        return
    width = max(2, *(len(str(c.id)) for c in conversations))
    print(f"{'id':>{width}}  {'updated (UTC)':16}  {'messages':>8}  title")
    for c in conversations:
        print(f"{c.id:>{width}}  {_minute(c.updated_at):16}  {counts[c.id]:>8}  {c.title}")


def _minute(stamp: str) -> str:
    """A stored ISO stamp as 'YYYY-MM-DD HH:MM' in UTC; an odd one is shown as it is."""
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return f"{when:%Y-%m-%d %H:%M}"
