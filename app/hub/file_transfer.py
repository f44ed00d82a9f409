"""Downloading one file from the Hub so that it survives real life.

huggingface_hub's own download starts over after any failure (its
`.incomplete` file belongs to one process and is deleted on error), which a
20 GB model on a home connection cannot afford. Here the bytes gather in
`NAME.part` beside the destination and every request asks `Range: bytes=N-`
from where the part ends, so a dropped connection, a stalled CDN (a read that
waits longer than the read timeout), a pause, or the app being killed all
resume from the last byte written. Failed requests are retried by
huggingface_hub's `http_stream_backoff` (429, 5xx, connection errors before the
body) and, once the body is flowing, by tenacity (resume after a drop), giving
up only after several tries in a row that add no byte.

Nothing unverified is ever moved into place: when the part is complete its
SHA-256 (computed while the bytes arrive, and over the existing part on resume)
must equal the repository's LFS hash, else the part is deleted and the reason
is one line. Only then is the part renamed to the destination (same folder,
so the rename is atomic).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import httpx2
from huggingface_hub.utils import http_stream_backoff
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential

from app.hub.hub_errors import HubError
from app.hub.remote_file import RemoteFileRef
from app.hub.remote_header import check_status
from app.screen_text.units import format_bytes
from engine.errors import ShardChatError

log = logging.getLogger(__name__)

HASH_READ_BYTES = 8 << 20
WRITE_QUEUE_CHUNKS = 256  # received chunks (about 64 KiB each) waiting for the disk


class DownloadStopped(ShardChatError):
    """Paused or cancelled by the person; `cancelled` says which."""

    def __init__(self, cancelled: bool) -> None:
        super().__init__("download cancelled" if cancelled else "download paused")
        self.cancelled = cancelled


class IntegrityError(HubError):
    """The bytes received are not the file the repository lists (its SHA-256 differs)."""


class _Interrupted(Exception):
    """The body stopped flowing (dropped, stalled): resume from the part's end."""


@dataclass(frozen=True)
class TransferPolicy:
    """How patient a transfer is; tests shorten the waits, nothing else changes."""

    read_timeout_s: float = 30.0  # a CDN silent this long is taken as stalled
    connect_timeout_s: float = 15.0
    tries_without_progress: int = 5
    first_wait_s: float = 1.0
    max_wait_s: float = 30.0


DEFAULT_POLICY = TransferPolicy()


class TransferControl:
    """Pause or cancel a running transfer from another thread; checked between chunks."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self.cancelled = False

    def pause(self) -> None:
        self._stop.set()

    def cancel(self) -> None:
        self.cancelled = True
        self._stop.set()

    def check(self) -> None:
        if self._stop.is_set():
            raise DownloadStopped(self.cancelled)


def download_file(
    ref: RemoteFileRef,
    headers: dict[str, str],
    dest: Path,
    size: int,
    sha256: str | None,
    on_bytes: Callable[[int], None],
    control: TransferControl,
    policy: TransferPolicy = DEFAULT_POLICY,
) -> None:
    """Fetch `ref` into `dest`, resuming any `dest.part`; `on_bytes(n)` after each write."""
    part = dest.with_name(dest.name + ".part")
    digest = _digest_of_part(part, size)
    retrying = Retrying(
        retry=retry_if_exception_type(_Interrupted),
        stop=_stop_without_progress(part, policy.tries_without_progress),
        wait=wait_exponential(multiplier=policy.first_wait_s, max=policy.max_wait_s),
        before_sleep=lambda state: log.warning(
            "%s: transfer interrupted (%s); resuming",
            ref.label,
            state.outcome.exception() if state.outcome else "?",
        ),
        reraise=True,
    )
    try:
        for attempt in retrying:
            with attempt:
                _fetch_rest(ref, headers, part, size, digest, on_bytes, control, policy)
    except _Interrupted as exc:
        raise HubError(f"{ref.label}: the download keeps failing ({exc}); try again later") from exc
    except DownloadStopped as stopped:
        if stopped.cancelled:
            part.unlink(missing_ok=True)
        raise
    _verify(part, digest, sha256, ref)
    os.replace(part, dest)


def _fetch_rest(
    ref: RemoteFileRef,
    headers: dict[str, str],
    part: Path,
    size: int,
    digest: hashlib._Hash,
    on_bytes: Callable[[int], None],
    control: TransferControl,
    policy: TransferPolicy,
) -> None:
    offset = part.stat().st_size if part.exists() else 0
    if offset >= size:
        return
    control.check()
    timeout = httpx2.Timeout(policy.read_timeout_s, connect=policy.connect_timeout_s)
    # identity: the bytes counted and hashed are the file's own, never a compressed form
    request_headers = {**headers, "Range": f"bytes={offset}-", "Accept-Encoding": "identity"}
    with http_stream_backoff(
        "GET", ref.url, headers=request_headers, timeout=timeout,
        base_wait_time=policy.first_wait_s, max_wait_time=policy.max_wait_s,
    ) as response:  # fmt: skip
        check_status(response, ref, has_token="authorization" in headers)
        _check_range(response, offset, size, ref)
        with _open_part(part, ref) as handle:
            writer = _PartWriter(handle, digest, part, on_bytes)
            try:
                for chunk in response.iter_bytes():  # as received: a drop loses no byte read
                    writer.put(chunk)
                    control.check()
            except httpx2.TransportError as exc:  # dropped, stalled past the read timeout
                raise _Interrupted(_reason(exc)) from exc
            finally:
                failure = writer.close()
            if failure is not None:
                raise failure
    written = part.stat().st_size
    if written < size:
        raise _Interrupted(f"connection closed at {written} of {size} bytes")


class _PartWriter:
    """Writes and hashes received chunks on a thread of its own.

    File writes and SHA-256 both release the GIL, so on a thread they overlap with
    receiving and parsing the HTTP body (which holds it); profiled on loopback here,
    writing took the longest of the three. Every chunk handed over is written before
    `close` returns, so a transfer that stops loses no byte it got.
    """

    def __init__(
        self, handle: BinaryIO, digest: hashlib._Hash, part: Path, on_bytes: Callable[[int], None]
    ) -> None:
        self._handle, self._digest, self._part, self._on_bytes = handle, digest, part, on_bytes
        self._chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=WRITE_QUEUE_CHUNKS)
        self._failure: HubError | None = None
        self._thread = threading.Thread(target=self._run, name="download-writer", daemon=True)
        self._thread.start()

    def put(self, chunk: bytes) -> None:
        if self._failure is not None:
            raise self._failure
        self._chunks.put(chunk)

    def close(self) -> HubError | None:
        """Write what is queued, stop the thread; the write failure, if there was one."""
        self._chunks.put(None)
        self._thread.join()
        return self._failure

    def _run(self) -> None:
        while (chunk := self._chunks.get()) is not None:
            if self._failure is not None:
                continue  # drain: the receiving side stops at its next put
            try:
                _write(self._handle, chunk, self._part)
            except HubError as exc:
                self._failure = exc
                continue
            self._digest.update(chunk)
            self._on_bytes(len(chunk))


def _check_range(response: httpx2.Response, offset: int, size: int, ref: RemoteFileRef) -> None:
    """The server must answer from `offset`; a 200 is only right when starting from 0."""
    if response.status_code == 200 and offset == 0:
        return
    content_range = response.headers.get("Content-Range", "")
    start = content_range.removeprefix("bytes ").split("-", 1)[0]
    total = content_range.rpartition("/")[2]
    if response.status_code != 206 or not start.isdigit() or int(start) != offset:
        raise HubError(f"{ref.label}: the server does not resume downloads (no byte ranges)")
    if total.isdigit() and int(total) != size:
        raise IntegrityError(
            f"{ref.label}: the server has {total} bytes, the repository lists {size}; "
            "the file changed, list the repository again"
        )


def _open_part(part: Path, ref: RemoteFileRef) -> BinaryIO:
    try:
        part.parent.mkdir(parents=True, exist_ok=True)
        return part.open("ab")
    except OSError as exc:
        raise HubError(f"cannot write {part}: {exc.strerror or exc}") from exc


def _write(handle: BinaryIO, chunk: bytes, part: Path) -> None:
    try:
        handle.write(chunk)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise HubError(
                f"the disk holding {part.parent} is full; free some space and resume "
                "(what was downloaded is kept)"
            ) from exc
        raise HubError(f"cannot write {part}: {exc.strerror or exc}") from exc


def _digest_of_part(part: Path, size: int) -> hashlib._Hash:
    """SHA-256 of what an earlier run left in the part (a longer part is started over)."""
    digest = hashlib.sha256()
    if not part.exists():
        return digest
    kept = part.stat().st_size
    if kept > size:
        log.warning("%s is longer than the file; starting over", part)
        part.unlink()
        return digest
    with part.open("rb") as handle:
        while kept > 0 and (block := handle.read(min(HASH_READ_BYTES, kept))):
            digest.update(block)
            kept -= len(block)
    return digest


def _verify(part: Path, digest: hashlib._Hash, sha256: str | None, ref: RemoteFileRef) -> None:
    if sha256 is None or digest.hexdigest() == sha256.lower():
        with part.open("rb+") as handle:
            os.fsync(handle.fileno())
        return
    size = part.stat().st_size
    part.unlink(missing_ok=True)
    raise IntegrityError(
        f"{ref.label}: the {format_bytes(size)} received do not match the repository's SHA-256; "
        "refused and discarded (download it again)"
    )


def _stop_without_progress(part: Path, tries: int) -> Callable[[RetryCallState], bool]:
    """Give up after `tries` attempts in a row that did not add a byte to the part."""
    state = {"offset": -1, "strikes": 0}

    def stop(_retry: RetryCallState) -> bool:
        offset = part.stat().st_size if part.exists() else 0
        state["strikes"] = state["strikes"] + 1 if offset == state["offset"] else 1
        state["offset"] = offset
        return state["strikes"] >= tries

    return stop


def _reason(exc: BaseException) -> str:
    if isinstance(exc, httpx2.TimeoutException):
        return "the server stopped sending"
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
