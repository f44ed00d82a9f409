"""The orders a Hub search can be listed in: the command line offers them as choices
without importing the Hub's client."""

from __future__ import annotations

SORT_KEYS: dict[str, str] = {"downloads": "downloads", "likes": "likes", "recent": "last_modified"}
