"""Loading dataclasses from dicts written by other versions of ShardChat.

Profiles, plans and inventories are saved as JSON and read back, possibly by
an older ShardChat than the one that wrote them: keys it does not know are
dropped instead of failing the load.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any


def known_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The entries of `data` that name a field of the dataclass `cls`."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}
