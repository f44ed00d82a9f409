"""A remote GGUF's header, fetched with HTTP Range requests and nothing more.

The planner needs only a GGUF's metadata and tensor table, which sit at the
start of the file: a few MB of a multi-GB file (most of it the tokenizer). So
the first request asks for a fixed prefix; when the header goes on past it, the
parser says how far it will at least go (`NeedMoreBytes.needed`, estimated
from what it read) and the next request asks for the rest of that, with a
quarter more room, appended to what came before. A typical header takes one or
two rounds; no round re-fetches a byte.

A server that ignores Range and starts sending the whole file is read only as
far as needed, then the connection is closed. Each request goes through
huggingface_hub's `http_stream_backoff`, which follows the redirect to the CDN
and retries 429, 5xx, timeouts and dropped connections with backoff.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx2
from huggingface_hub.utils import http_stream_backoff

from app.hub.hub_errors import GatedError, HubError, gated_message, status_message
from app.hub.remote_file import RemoteFileRef
from engine.errors import ModelFileError
from engine.model.gguf_header import GGUFHeader, NeedMoreBytes, parse_header

log = logging.getLogger(__name__)

FIRST_RANGE_BYTES = 1 << 20
HEADROOM = 1.25  # a round asks this much past the parser's estimate
MAX_HEADER_BYTES = 1 << 30  # a header bigger than this is not a model we can plan
MAX_ROUNDS = 8
READ_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RemoteHeader:
    header: GGUFHeader
    raw: bytes  # the header's own bytes (what a cache keeps)
    file_size: int | None  # from Content-Range, when the server said
    fetched_bytes: int  # body bytes received, all rounds together
    rounds: int


def fetch_header(ref: RemoteFileRef, headers: dict[str, str]) -> RemoteHeader:
    """Read the GGUF header of a file on the Hub; `headers` carry the token, if any."""
    label = ref.label
    prefix = bytearray()
    size: int | None = None
    want = FIRST_RANGE_BYTES
    for rounds in range(1, MAX_ROUNDS + 1):
        size = _fetch_into(prefix, ref, headers, want) or size
        try:
            header = parse_header(bytes(prefix))
        except NeedMoreBytes as more:
            at_end = size is not None and len(prefix) >= size
            if at_end:
                raise ModelFileError(
                    f"{label}: truncated GGUF (the file ends in its header)"
                ) from None
            want = min(int(more.needed * HEADROOM), MAX_HEADER_BYTES)
            if more.needed > MAX_HEADER_BYTES:
                raise ModelFileError(f"{label}: GGUF header larger than 1 GiB") from None
            if size is not None:
                want = min(want, size)
            continue
        except ModelFileError as exc:
            raise ModelFileError(f"{label}: {exc}") from exc
        log.info("header of %s: %d bytes in %d round(s)", label, len(prefix), rounds)
        return RemoteHeader(header, bytes(prefix[: header.header_bytes]), size, len(prefix), rounds)
    raise ModelFileError(f"{label}: GGUF header not complete after {MAX_ROUNDS} range requests")


def _fetch_into(
    prefix: bytearray, ref: RemoteFileRef, headers: dict[str, str], want: int
) -> int | None:
    """Append bytes [len(prefix), want) of the file to `prefix`; returns the file size if told."""
    start = len(prefix)
    request_headers = {**headers, "Range": f"bytes={start}-{want - 1}"}
    timeout = httpx2.Timeout(READ_TIMEOUT_S, connect=10.0)
    with http_stream_backoff("GET", ref.url, headers=request_headers, timeout=timeout) as response:
        check_status(response, ref, has_token="authorization" in headers)
        if response.status_code == 200 and start:
            raise HubError(f"{ref.label}: the server ignores byte ranges; cannot read the header")
        for chunk in response.iter_bytes():
            prefix += chunk
            if len(prefix) >= want:
                break  # a server that ignored the range stops here: the response is closed
        return _total_size(response)


def check_status(response: httpx2.Response, ref: RemoteFileRef, has_token: bool) -> None:
    """Raise the error a non-success answer to a file request means (206/200 pass)."""
    status = response.status_code
    if status in (200, 206):
        return
    if response.headers.get("X-Error-Code") == "GatedRepo" or status in (401, 403):
        raise GatedError(gated_message(ref.endpoint, ref.repo_id, has_token))
    if status == 404:
        raise ModelFileError(f"{ref.label}: not found on {ref.endpoint} (HTTP 404)")
    if status == 416:
        raise ModelFileError(f"{ref.label}: the file is shorter than expected (HTTP 416)")
    raise HubError(f"{ref.label}: {status_message(ref.endpoint, status)}")


def _total_size(response: httpx2.Response) -> int | None:
    content_range = response.headers.get("Content-Range", "")
    _, _, total = content_range.rpartition("/")
    if total.isdigit():
        return int(total)
    if response.status_code == 200 and response.headers.get("Content-Length", "").isdigit():
        return int(response.headers["Content-Length"])
    return None
