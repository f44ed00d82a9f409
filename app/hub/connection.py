"""Whether the Hub can be reached at all, asked once and quickly before talking to it.

huggingface_hub retries a refused connection five times with backoff (about 25 s):
right for a connection that dropped for a moment, wrong when there is none. A
person offline should hear so at once, in one line. So before a search, a listing
or a download starts, one HEAD of the endpoint with a short connect timeout tells
"no connection" (refused, no such host, no route, no answer) from everything
else, and only "no connection" stops the call. Anything that answers, even with
an error status, counts as connected: the call itself then says what went wrong
and keeps its retries, as does a transfer cut mid-way.

A Hub found reachable is remembered for a minute per endpoint, so browsing pays
for one probe, not one per click.
"""

from __future__ import annotations

import re
import threading
import time

import httpx2
from huggingface_hub.utils import get_session

from app.hub.hub_errors import HubOfflineError

CONNECT_TIMEOUT_S = 2.0
REMEMBER_REACHABLE_S = 60.0
_ERRNO_PREFIX = re.compile(r"^\[Errno -?\d+\]\s*")

_reached: dict[str, float] = {}  # endpoint -> monotonic time it last answered
_lock = threading.Lock()


def require_connection(endpoint: str) -> None:
    """Return when `endpoint` can be reached; raise `HubOfflineError` at once when not."""
    with _lock:
        if time.monotonic() - _reached.get(endpoint, -REMEMBER_REACHABLE_S) < REMEMBER_REACHABLE_S:
            return
    try:
        get_session().head(
            endpoint,
            timeout=httpx2.Timeout(CONNECT_TIMEOUT_S * 2, connect=CONNECT_TIMEOUT_S),
            follow_redirects=False,
        )
    except httpx2.ConnectTimeout as exc:
        raise HubOfflineError(
            offline_message(endpoint, f"no answer in {CONNECT_TIMEOUT_S:.0f} s")
        ) from exc
    except httpx2.ConnectError as exc:  # refused, no such host, no route, a proxy refusing
        raise HubOfflineError(offline_message(endpoint, _reason(exc))) from exc
    except httpx2.TransportError:
        return  # connected, then something else went wrong: the call itself will say what
    with _lock:
        _reached[endpoint] = time.monotonic()


def offline_message(endpoint: str, reason: str) -> str:
    return (
        f"no connection to the Hub ({endpoint}: {reason}); check the network, or HF_ENDPOINT "
        "for a mirror"
    )


def forget_reached() -> None:
    """Probe again next time (the network changed, or a test starts afresh)."""
    with _lock:
        _reached.clear()


def _reason(exc: httpx2.ConnectError) -> str:
    text = str(exc).strip().splitlines()
    reason = _ERRNO_PREFIX.sub("", text[0]) if text else ""
    return reason[:1].lower() + reason[1:] if reason else "the connection failed"
