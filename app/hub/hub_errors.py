"""Every way talking to the Hub fails, as one sentence a person can act on.

huggingface_hub raises its own errors (not found, gated, HTTP status) and the
HTTP client below it raises connection and timeout errors; the catalogue, the
header reader and the downloader all turn them into `HubError` (the Hub is
unreachable or refused: exit 1 in the CLI, a red line in the window) or
`BadInputError` (the repository or file named does not exist: exit 2) here, in
one place, so the CLI and the window say the same thing. No connection at all is
`HubOfflineError`, both at once (app.hub.connection finds it before any retry).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx2
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from engine.errors import BadInputError, ShardChatError

TRANSIENT_STATUS = (429, 500, 502, 503, 504)


class HubError(ShardChatError):
    """The Hub could not be reached or refused; the message says why and what to do."""


class HubOfflineError(HubError, BadInputError):
    """No connection to the Hub at all: said at once, without retries; exit 2 in the CLI, as
    the person has to change something (the network, HF_ENDPOINT) before trying again."""


class GatedError(HubError):
    """A gated repository: the person needs a token, or to accept the terms on its page."""


def repo_page(endpoint: str, repo_id: str) -> str:
    return f"{endpoint}/{repo_id}"


@contextlib.contextmanager
def hub_errors(
    endpoint: str, repo_id: str | None = None, has_token: bool = False
) -> Iterator[None]:
    """Run a Hub call; re-raise whatever it raises as one of our errors with its sentence."""
    try:
        yield
    except GatedRepoError as exc:
        raise GatedError(gated_message(endpoint, repo_id or "", has_token)) from exc
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        raise BadInputError(f"no repository {repo_id!r} on {endpoint} (or it is private)") from exc
    except EntryNotFoundError as exc:
        raise BadInputError(f"{repo_id}: no such file ({_short(exc)})") from exc
    except HfHubHTTPError as exc:
        raise HubError(status_message(endpoint, _status(exc))) from exc
    except httpx2.TimeoutException as exc:
        raise HubError(f"{endpoint} did not answer in time; check the connection") from exc
    except httpx2.TransportError as exc:
        raise HubError(f"cannot reach {endpoint}: {_short(exc)}") from exc


def gated_message(endpoint: str, repo_id: str, has_token: bool) -> str:
    page = repo_page(endpoint, repo_id)
    if has_token:
        return f"{repo_id} is gated: accept its terms at {page} with the account of your token"
    return (
        f"{repo_id} is gated: add a Hugging Face token (HF_TOKEN, `hf auth login`, or "
        f"`shardchat models token`) and accept its terms at {page}"
    )


def status_message(endpoint: str, status: int | None) -> str:
    if status == 429:
        return f"{endpoint} is limiting requests (HTTP 429); try again in a minute"
    if status is not None and status >= 500:
        return f"{endpoint} is having trouble (HTTP {status}); try again later"
    return f"{endpoint} refused the request (HTTP {status})"


def _status(exc: HfHubHTTPError) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
