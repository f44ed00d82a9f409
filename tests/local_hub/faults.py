"""Faults a LocalHub injects: error statuses, bodies cut short, bodies that stall, throttling.

Each fault applies to requests whose path contains a substring, `times` times,
in registration order. A status is answered when a matching request arrives; a
cut or a stall applies to the next matching response that has a body (a CDN or
plain-file GET; not a HEAD or a 302).
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

STALL_LIMIT_S = 60.0


@dataclass
class Fault:
    kind: str  # "status", "cut", "stall"
    path_contains: str
    remaining: int
    status: int = 0
    headers: Mapping[str, str] | None = None
    n_bytes: int = 0


class Faults:
    """Failures to inject, each for the next `times` requests whose path contains a substring."""

    def __init__(self) -> None:
        self.throttle_bytes_per_s: float | None = None  # pace every body (per response)
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._stalls = threading.Condition()
        self._release_generation = 0
        self._closed = False

    def fail_next(
        self,
        path_contains: str,
        status: int,
        times: int = 1,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer `status` (JSON error body). A 429 says Retry-After: 0 unless `headers` are given
        (huggingface_hub's http_backoff then waits 1 s: it adds a second to Retry-After)."""
        self._add(Fault("status", path_contains, times, status=status, headers=headers))

    def cut_after(self, path_contains: str, n_bytes: int, times: int = 1) -> None:
        """Send `n_bytes` of the body, then close the connection (the client sees a short body)."""
        self._add(Fault("cut", path_contains, times, n_bytes=n_bytes))

    def stall_after(self, path_contains: str, n_bytes: int, times: int = 1) -> None:
        """Send `n_bytes` of the body, then nothing while the socket stays open: until the
        client closes it (then the hub closes too), `release_stalls()` (then the rest of the
        body follows), the hub closes, or 60 s pass (then the connection is closed)."""
        self._add(Fault("stall", path_contains, times, n_bytes=n_bytes))

    def release_stalls(self) -> None:
        """Let every response stalled now go on with the rest of its body."""
        with self._stalls:
            self._release_generation += 1
            self._stalls.notify_all()

    def clear(self) -> None:
        """Forget the faults not yet used (the throttle stays)."""
        with self._lock:
            self._faults.clear()

    @property
    def pending(self) -> int:
        """Uses left of all registered faults."""
        with self._lock:
            return sum(fault.remaining for fault in self._faults)

    def _add(self, fault: Fault) -> None:
        if fault.remaining < 1:
            raise ValueError(f"times must be at least 1, not {fault.remaining}")
        if fault.kind != "status" and fault.n_bytes < 0:
            raise ValueError(f"n_bytes must not be negative: {fault.n_bytes}")
        with self._lock:
            self._faults.append(fault)

    def take(self, path: str, kinds: tuple[str, ...]) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.kind in kinds and fault.path_contains in path:
                    fault.remaining -= 1
                    if not fault.remaining:
                        self._faults.remove(fault)
                    return fault
        return None

    def releases(self) -> int:
        """How many times stalls were released so far: read it before sending the bytes a
        stall follows, since a client that has them may release the stall at once."""
        with self._stalls:
            return self._release_generation

    def stall(self, sock: socket.socket, generation: int) -> bool:
        """Wait until a release after `generation` (from `releases()`); True if released,
        False if the client left, the hub closed or the time limit passed."""
        deadline = time.monotonic() + STALL_LIMIT_S
        while time.monotonic() < deadline:
            with self._stalls:
                if self._release_generation != generation:
                    return True
                if self._closed:
                    return False
                self._stalls.wait(0.05)
            if _peer_closed(sock):
                return False
        return False

    def close(self) -> None:
        with self._stalls:
            self._closed = True
            self._stalls.notify_all()


def _peer_closed(sock: socket.socket) -> bool:
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and not sock.recv(1, socket.MSG_PEEK)
    except (OSError, ValueError):
        return True
