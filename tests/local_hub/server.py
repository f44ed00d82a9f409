"""A local Hugging Face Hub: the Hub's HTTP protocol on 127.0.0.1, with fault injection.

The model catalogue searches the Hub, lists repository files, reads GGUF
headers with Range requests and downloads resumably. Our machines have no
network, so tests and benchmarks run all of that against this server, which
answers the requests huggingface_hub (2.4, over httpx2) and a plain Range
downloader make, with the headers and error codes the real Hub uses:

- ``GET /api/models`` (search, filter, author, sort, limit, expand, full,
  cardData; Link-header pages), ``GET /api/models/{id}[/revision/{rev}]``
  (``blobs=true`` adds sizes and LFS hashes), ``GET /api/models/{id}/tree/{rev}[/{path}]``
  (recursive, expand; Link-header pages), ``POST /api/models/{id}/paths-info/{rev}``,
  ``GET /api/whoami-v2``.
- ``HEAD``/``GET /{id}/resolve/{rev}/{path}``: plain git files are served there
  (``ETag`` = git blob id); LFS files (``*.gguf``, anything above 10 MB) answer 302
  to a CDN URL with ``X-Linked-Size``, ``X-Linked-Etag`` (sha256) and ``X-Repo-Commit``.
- The CDN listens on a second port (``cdn_url``), as the real CDN is another host:
  huggingface_hub then reads a file's metadata from the 302 itself and does not
  send the token along, as it does with huggingface.co. CDN URLs carry a
  signature; a URL rebuilt without it is refused (403), as a signed URL would be.
  Bodies support one ``Range`` (``bytes=a-b``, ``a-``, ``-n``): 206 with
  ``Content-Range``, 416 with ``Content-Range: bytes */size`` past the end.
- Errors carry ``X-Error-Code`` / ``X-Error-Message`` as hf_raise_for_status reads
  them: RepoNotFound (401 without a token, 404 with one), RevisionNotFound,
  EntryNotFound, GatedRepo (401 without a token, 403 before `accept_terms`), and
  401 "Invalid credentials in Authorization header" for a token the hub does not know.
  A gated repository's info, tree, README.md and .gitattributes stay readable.

Listing responses carry what the real Hub returns by default (metadata.py):
``list_models`` gives id, likes, downloads, tags, pipeline_tag, library_name,
createdAt and trendingScore; author, sha, lastModified, gated, siblings, cardData
and gguf need ``expand`` (or ``full`` / ``cardData``) there, as on huggingface.co.

Faults (faults.py) apply to requests whose path contains a substring, in
registration order: a status (429 with ``Retry-After: 0``, 5xx, ...) is answered
when such a request arrives; a cut or a stall applies to the next such response
that has a body (a CDN or plain-file GET, not a HEAD or a 302). Everything the
hub answers is recorded (`requests`), and body bytes are counted per file
(`bytes_served`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.server
import json
import logging
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode

from .faults import Fault, Faults
from .files import HubFile, is_lfs_path
from .metadata import (
    EXPANDABLE,
    INFO_DEFAULT,
    LIST_DEFAULT,
    LIST_FULL,
    Repo,
    commit_sha,
    entry_json,
    first,
    folders_of,
    hub_tags,
    model_json,
    search,
    tree_entries,
    true,
    with_card,
)

LOGGER = logging.getLogger(__name__)

MODELS_PAGE_SIZE = 1000
TREE_PAGE_SIZE = 1000  # the Hub's pages: 1000 entries, 50 when expanded
TREE_EXPAND_PAGE_SIZE = 50
DEFAULT_DATE = "2026-01-01T00:00:00.000Z"
GATED_ALWAYS_READABLE = ("README.md", ".gitattributes")


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class RequestRecord:
    """One request the hub answered (recorded when its status line is sent)."""

    method: str
    path: str  # without the query, still percent-encoded
    range: str | None  # the Range header, if any
    status: int
    query: str = ""
    fault: str | None = None  # "status", "cut" or "stall" when a fault shaped the answer


# ---------------------------------------------------------------- the hub


class LocalHub:
    """A Hub-compatible HTTP server on 127.0.0.1 (a context manager; `url` is the endpoint)."""

    def __init__(self) -> None:
        self.valid_tokens: set[str] = set()
        self.faults = Faults()
        self.requests: list[RequestRecord] = []
        self.models_page_size = MODELS_PAGE_SIZE
        self.tree_page_size = TREE_PAGE_SIZE
        self.tree_expand_page_size = TREE_EXPAND_PAGE_SIZE
        self._repos: dict[str, Repo] = {}
        self._additions: dict[str, int] = {}
        self._blobs: dict[str, HubFile] = {}  # sha256 -> content, for CDN URLs of old commits
        self._accepted: set[tuple[str, str]] = set()
        self._bytes: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._secret = hashlib.sha256(repr(id(self)).encode() + str(time.time()).encode()).digest()
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []
        self._connections: set[socket.socket] = set()
        self.url = ""
        self.cdn_url = ""

    # -------------------------------------------------------- lifecycle

    def start(self) -> LocalHub:
        if self._servers:
            return self
        for _ in range(2):  # the Hub, and its CDN on another origin
            server = _Server(("127.0.0.1", 0), _Handler)
            server.hub = self
            thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            )
            thread.start()
            self._servers.append(server)
            self._threads.append(thread)
        self.url = f"http://127.0.0.1:{self._servers[0].server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self._servers[1].server_address[1]}"
        LOGGER.info("local hub at %s (CDN %s)", self.url, self.cdn_url)
        return self

    def close(self) -> None:
        """Stop serving: release stalls, close open connections, free the ports."""
        self.faults.close()
        for server in self._servers:
            server.shutdown()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for server in self._servers:
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()

    def __enter__(self) -> LocalHub:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -------------------------------------------------------- content

    def add_repo(
        self,
        repo_id: str,
        files: Mapping[str, HubFile],
        *,
        card: str = "",
        gated: bool | str = False,
        tags: Sequence[str] = ("gguf",),
        downloads: int = 0,
        likes: int = 0,
        created_at: str = DEFAULT_DATE,
        last_modified: str | None = None,
        pipeline_tag: str | None = "text-generation",
        license: str | None = None,
        card_data: Mapping[str, Any] | None = None,
        gguf_info: Mapping[str, Any] | None = None,
        trending_score: int | None = None,
        library_name: str | None = "gguf",
    ) -> str:
        """Publish (or replace) a model repository; return its new commit sha (40 hex).

        README.md is written from `card` under a YAML front matter holding `license`,
        `pipeline_tag`, `tags` and `card_data` (unless `files` has its own), and a
        .gitattributes is added. `gated`: False, True ("manual") or "auto". `gguf_info`
        is the Hub's "gguf" summary; None derives it from the first GGUF's header.
        """
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id):
            raise ValueError(f"repo ids are namespace/name, not {repo_id!r}")
        front = dict(card_data or {})
        for key, value in (
            ("tags", list(tags)),
            ("pipeline_tag", pipeline_tag),
            ("license", license),
        ):
            if value:
                front = {key: value, **front}
        repo_files, front = with_card(files, card, front)
        with self._lock:
            generation = self._additions.get(repo_id, 0) + 1
            self._additions[repo_id] = generation
        repo = Repo(
            repo_id=repo_id,
            files=repo_files,
            lfs={path for path, file in repo_files.items() if is_lfs_path(path, file)},
            sha=commit_sha(repo_id, generation, repo_files, card, front),
            card_data=front,
            gated="manual" if gated is True else gated,
            tags=hub_tags(tags, pipeline_tag, front),
            downloads=downloads,
            likes=likes,
            trending_score=likes if trending_score is None else trending_score,
            created_at=created_at,
            last_modified=last_modified or created_at,
            pipeline_tag=pipeline_tag,
            library_name=library_name,
            gguf_info=dict(gguf_info) if gguf_info is not None else None,
        )
        with self._lock:
            self._repos[repo_id] = repo
        return repo.sha

    def repo_file(self, repo_id: str, path: str) -> HubFile:
        return self._repos[repo_id].files[path]

    def commit_sha(self, repo_id: str) -> str:
        return self._repos[repo_id].sha

    def accept_terms(self, token: str, repo_id: str) -> None:
        """The user of `token` has been granted access to the gated `repo_id`."""
        if repo_id not in self._repos:
            raise KeyError(f"no repository {repo_id!r}")
        with self._lock:
            self._accepted.add((token, repo_id))

    # -------------------------------------------------------- counters

    def bytes_served(self, repo_id: str, filename: str) -> int:
        """Body bytes sent for that file (from the CDN and from resolve), across requests."""
        with self._lock:
            return self._bytes.get((repo_id, filename), 0)

    def reset_counters(self) -> None:
        with self._lock:
            self.requests.clear()
            self._bytes.clear()

    def _count(self, key: tuple[str, str] | None, n_bytes: int) -> None:
        if key is not None:
            with self._lock:
                self._bytes[key] = self._bytes.get(key, 0) + n_bytes

    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            self.requests.append(record)

    def _track(self, conn: socket.socket, open_: bool) -> None:
        with self._lock:
            if open_:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    # -------------------------------------------------------- CDN links

    def _cdn_location(self, repo: Repo, path: str, file: HubFile) -> str:
        with self._lock:
            self._blobs.setdefault(file.sha256, file)
        cdn_path = f"/cdn/{repo.repo_id}/{file.sha256}/{quote(path)}"
        query = urlencode({"X-Amz-Expires": "3600", "X-Amz-Signature": self._signature(cdn_path)})
        return f"{self.cdn_url}{cdn_path}?{query}"

    def _signature(self, cdn_path: str) -> str:
        return hmac.new(self._secret, cdn_path.encode(), "sha256").hexdigest()[:40]

    def _blob(self, repo_id: str, path: str, sha256: str) -> HubFile | None:
        repo = self._repos.get(repo_id)
        file = repo.files.get(path) if repo else None
        if file is not None and repo is not None and repo.is_lfs(path) and file.sha256 == sha256:
            return file
        with self._lock:
            return self._blobs.get(sha256)


# ---------------------------------------------------------------- HTTP


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    hub: LocalHub

    def handle_error(self, request: object, client_address: tuple[str, int]) -> None:
        """A client that hung up mid-answer is normal here (cut, stalled, cancelled requests);
        anything else goes to the log, never to the tests' stderr."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            return
        LOGGER.error("local hub: error answering %s", client_address, exc_info=True)


class _Unsatisfiable(Exception):
    pass


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "LocalHub/1.0"
    disable_nagle_algorithm = True
    timeout = 120  # an idle keep-alive connection is closed after this
    server: _Server

    # -------------------------------------------------------- plumbing

    @property
    def hub(self) -> LocalHub:
        return self.server.hub

    def setup(self) -> None:
        super().setup()
        self.hub._track(self.connection, True)

    def finish(self) -> None:
        self.hub._track(self.connection, False)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        LOGGER.debug("%s - %s", self.address_string(), format % args)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._dispatch(head_only=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch(head_only=True)

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch(head_only=False)

    def _dispatch(self, head_only: bool) -> None:
        raw_path, _, self._query = self.path.partition("?")
        self._raw_path = raw_path
        self._params = parse_qs(self._query, keep_blank_values=True)
        self._fault_name: str | None = None
        self._started = False
        try:
            self._read_request_body()
            fault = self.hub.faults.take(unquote(raw_path), ("status",))
            if fault is not None:
                self._fault_name = "status"
                self._injected(fault, head_only)
                return
            self._route(raw_path, head_only)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
            self.close_connection = True
        except Exception:  # a bug here: answer 500 (if still possible) rather than hang up
            LOGGER.exception("local hub failed on %s %s", self.command, self.path)
            if not self._started:
                self._error(500, "the local hub failed (see its log)")
            self.close_connection = True

    def _read_request_body(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._body = self.rfile.read(length) if length else b""

    def _route(self, raw_path: str, head_only: bool) -> None:
        parts = raw_path.split("/")[1:]
        if self.command == "POST":
            if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] == "paths-info":
                return self._paths_info(f"{parts[2]}/{parts[3]}", unquote(parts[5]))
            return self._error(405, "Method not allowed")
        if parts[:2] == ["api", "whoami-v2"]:
            return self._whoami()
        if parts[:2] == ["api", "models"]:
            return self._api_models(parts[2:])
        if parts[:1] == ["cdn"] and len(parts) >= 5:
            repo_id = f"{unquote(parts[1])}/{unquote(parts[2])}"
            return self._cdn(repo_id, parts[3], unquote("/".join(parts[4:])), head_only)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo_id = f"{unquote(parts[0])}/{unquote(parts[1])}"
            path = unquote("/".join(parts[4:]))
            return self._resolve(repo_id, unquote(parts[3]), path, head_only)
        return self._error(404, "Sorry, we can't find the page you are looking for.")

    def _api_models(self, rest: list[str]) -> None:
        if not rest or rest == [""]:
            return self._list_models()
        if len(rest) < 2:
            return self._error(404, "Not Found")
        repo_id, tail = f"{unquote(rest[0])}/{unquote(rest[1])}", rest[2:]
        if not tail:
            return self._model_info(repo_id, "main")
        if tail[0] == "revision" and len(tail) == 2:
            return self._model_info(repo_id, unquote(tail[1]))
        if tail[0] == "tree" and len(tail) >= 2:
            return self._tree(repo_id, unquote(tail[1]), unquote("/".join(tail[2:])))
        return self._error(404, "Not Found")

    # -------------------------------------------------------- responses

    def _start(self, status: int, headers: Mapping[str, str]) -> None:
        self._started = True
        self.hub._record(
            RequestRecord(
                self.command,
                self._raw_path,
                self.headers.get("Range"),
                status,
                self._query,
                self._fault_name,
            )
        )
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _send(
        self, status: int, body: bytes, headers: Mapping[str, str] | None = None, head: bool = False
    ) -> None:
        all_headers = {"Content-Length": str(len(body)), **(headers or {})}
        self._start(status, all_headers)
        if body and not head and self.command != "HEAD":
            self.connection.sendall(body)

    def _json(self, value: Any, headers: Mapping[str, str] | None = None) -> None:
        body = json.dumps(value).encode()
        self._send(
            200, body, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}
        )

    def _error(
        self,
        status: int,
        message: str,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        all_headers = {
            "Content-Type": "application/json; charset=utf-8",
            "X-Error-Message": message,
        }
        if code:
            all_headers["X-Error-Code"] = code
        self._send(
            status, json.dumps({"error": message}).encode(), {**all_headers, **(headers or {})}
        )

    def _injected(self, fault: Fault, head_only: bool) -> None:
        headers = dict(fault.headers) if fault.headers is not None else {}
        if fault.headers is None and fault.status == 429:
            headers["Retry-After"] = "0"
        message = f"injected fault: HTTP {fault.status}"
        body = json.dumps({"error": message}).encode()
        self._send(fault.status, body, {"Content-Type": "application/json", **headers}, head_only)

    # -------------------------------------------------------- auth

    def _token(self) -> str | None:
        value = self.headers.get("Authorization", "")
        if value.lower().startswith("bearer "):
            return value[7:].strip() or None
        return None

    def _check_token(self) -> bool:
        """False (and a 401 sent) when a token is given that the hub does not know."""
        token = self._token()
        if token is not None and token not in self.hub.valid_tokens:
            self._error(401, "Invalid credentials in Authorization header")
            return False
        return True

    def _repo(self, repo_id: str, revision: str) -> Repo | None:
        """The repository at `revision`, or None with the Hub's error sent."""
        if not self._check_token():
            return None
        repo = self.hub._repos.get(repo_id)
        if repo is None:
            if self._token() is None:
                self._error(401, "Invalid username or password.", "RepoNotFound")
            else:
                self._error(404, "Repository not found", "RepoNotFound")
            return None
        if revision not in ("main", repo.sha):
            self._error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
            return None
        return repo

    def _may_download(self, repo: Repo, path: str) -> bool:
        if not repo.gated or path in GATED_ALWAYS_READABLE:
            return True
        token = self._token()
        if token is None:
            self._error(
                401,
                f"Access to model {repo.repo_id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in.",
                "GatedRepo",
                {"X-Repo-Commit": repo.sha},
            )
            return False
        if (token, repo.repo_id) not in self.hub._accepted:
            self._error(
                403,
                f"Access to model {repo.repo_id} is restricted and you are not in the authorized "
                f"list. Visit {self.hub.url}/{repo.repo_id} to ask for access.",
                "GatedRepo",
                {"X-Repo-Commit": repo.sha},
            )
            return False
        return True

    def _whoami(self) -> None:
        token = self._token()
        if token is None or token not in self.hub.valid_tokens:
            return self._error(401, "Invalid credentials in Authorization header")
        name = "shardtest-user"
        access = {"displayName": "local-hub", "role": "read"}
        self._json(
            {
                "type": "user",
                "id": "0" * 24,
                "name": name,
                "fullname": "Shard Test",
                "email": None,
                "orgs": [],
                "auth": {"type": "access_token", "accessToken": access},
            }
        )

    # -------------------------------------------------------- /api/models

    def _list_models(self) -> None:
        if not self._check_token():
            return
        try:
            repos = search(list(self.hub._repos.values()), self._params)
        except ValueError as exc:
            return self._error(400, str(exc))
        properties = self._listing_properties()
        if properties is None:
            return
        limit = _int(first(self._params, "limit"))
        page_size = min(limit or self.hub.models_page_size, self.hub.models_page_size)
        page, next_url = self._page(repos, page_size)
        self._json([model_json(r, properties, blobs=False) for r in page], next_url)

    def _listing_properties(self) -> list[str] | None:
        expand = self._expand()
        if expand is None:
            return None
        if expand:
            return expand
        properties = list(LIST_FULL if true(first(self._params, "full")) else LIST_DEFAULT)
        if true(first(self._params, "cardData")):
            properties.append("cardData")
        return properties

    def _expand(self) -> list[str] | None:
        """The expand[] properties asked for ([] when none), or None with a 400 sent."""
        expand = self._params.get("expand", []) + self._params.get("expand[]", [])
        if unknown := [name for name in expand if name not in EXPANDABLE]:
            self._error(400, f'"expand" must be one of {sorted(EXPANDABLE)}, not {unknown}')
            return None
        return expand

    def _page(self, items: list[Any], page_size: int) -> tuple[list[Any], dict[str, str]]:
        """One page of `items` from the `cursor` parameter, and a Link header to the next."""
        start = _int(first(self._params, "cursor")) or 0
        page = items[start : start + page_size]
        if start + page_size >= len(items):
            return page, {}
        params = {k: v for k, v in self._params.items() if k != "cursor"}
        query = urlencode([*((k, v) for k, vs in params.items() for v in vs)])
        query += ("&" if query else "") + f"cursor={start + page_size}"
        host = self.hub.url if self.server is self.hub._servers[0] else self.hub.cdn_url
        return page, {"Link": f'<{host}{self._raw_path}?{query}>; rel="next"'}

    def _model_info(self, repo_id: str, revision: str) -> None:
        repo = self._repo(repo_id, revision)
        if repo is None:
            return
        expand = self._expand()
        if expand is None:
            return
        blobs = true(first(self._params, "blobs"))
        properties = expand or INFO_DEFAULT
        self._json(model_json(repo, properties, blobs=blobs))

    # -------------------------------------------------------- trees

    def _tree(self, repo_id: str, revision: str, path: str) -> None:
        repo = self._repo(repo_id, revision)
        if repo is None:
            return
        path = path.strip("/")
        recursive = true(first(self._params, "recursive"))
        expanded = true(first(self._params, "expand"))
        entries = tree_entries(repo, path, recursive)
        if entries is None:
            return self._error(
                404,
                f'{path} does not exist on "{revision}"',
                "EntryNotFound",
                {"X-Repo-Commit": repo.sha},
            )
        size = self.hub.tree_expand_page_size if expanded else self.hub.tree_page_size
        page, link = self._page(entries, size)
        self._json([entry_json(repo, entry, expanded) for entry in page], link)

    def _paths_info(self, repo_id: str, revision: str) -> None:
        repo = self._repo(repo_id, revision)
        if repo is None:
            return
        form = parse_qs(self._body.decode(), keep_blank_values=True)
        expanded = true(first(form, "expand"))
        folders = folders_of(repo)
        found = [p.strip("/") for p in form.get("paths", [])]
        entries = [p for p in found if p in repo.files or p in folders]
        self._json([entry_json(repo, entry, expanded) for entry in entries])

    # -------------------------------------------------------- files

    def _resolve(self, repo_id: str, revision: str, path: str, head_only: bool) -> None:
        repo = self._repo(repo_id, revision)
        if repo is None or not self._may_download(repo, path):
            return
        file = repo.files.get(path)
        if file is None:
            return self._error(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": repo.sha})
        if repo.is_lfs(path):
            headers = {
                "Location": self.hub._cdn_location(repo, path, file),
                "X-Linked-Size": str(file.size),
                "X-Linked-Etag": f'"{file.sha256}"',
                "ETag": f'"{file.sha256}"',
                "X-Repo-Commit": repo.sha,
                "Content-Type": "text/plain; charset=utf-8",
            }
            return self._send(302, b"", headers)
        headers = {
            "ETag": f'"{file.git_oid}"',
            "X-Repo-Commit": repo.sha,
            "Content-Type": _content_type(path),
        }
        self._content(file, headers, (repo_id, path), head_only)

    def _cdn(self, repo_id: str, sha256: str, path: str, head_only: bool) -> None:
        signature = first(self._params, "X-Amz-Signature") or ""
        expected = self.hub._signature(self._raw_path_unsigned())
        if not hmac.compare_digest(signature, expected):
            return self._error(403, "AccessDenied: the request signature does not match")
        file = self.hub._blob(repo_id, path, sha256)
        if file is None:
            return self._error(404, "NoSuchKey: the specified key does not exist")
        name = path.rsplit("/", 1)[-1]
        headers = {
            "ETag": f'"{sha256}"',
            "Content-Type": "binary/octet-stream",
            "Content-Disposition": f"inline; filename*=UTF-8''{quote(name)}; filename=\"{name}\";",
            "Cache-Control": "public, max-age=604800, immutable",
        }
        self._content(file, headers, (repo_id, path), head_only)

    def _raw_path_unsigned(self) -> str:
        parts = self._raw_path.split("/")
        repo_id = f"{unquote(parts[2])}/{unquote(parts[3])}"
        return f"/cdn/{repo_id}/{parts[4]}/{quote(unquote('/'.join(parts[5:])))}"

    def _content(
        self,
        file: HubFile,
        headers: Mapping[str, str],
        key: tuple[str, str],
        head_only: bool,
    ) -> None:
        try:
            span = _parse_range(self.headers.get("Range"), file.size)
        except _Unsatisfiable:
            return self._error(
                416,
                "Requested Range Not Satisfiable",
                headers={"Content-Range": f"bytes */{file.size}"},
            )
        start, end = span or (0, file.size)
        all_headers = {**headers, "Accept-Ranges": "bytes", "Content-Length": str(end - start)}
        if span is not None:
            all_headers["Content-Range"] = f"bytes {start}-{end - 1}/{file.size}"
        fault = None
        if not head_only and end > start:
            fault = self.hub.faults.take(unquote(self._raw_path), ("cut", "stall"))
            self._fault_name = fault.kind if fault else None
        self._start(206 if span is not None else 200, all_headers)
        if head_only:
            return
        if fault is None:
            self._stream(file, start, end, key)
            return
        stop = min(end, start + fault.n_bytes)
        releases = self.hub.faults.releases()
        self._stream(file, start, stop, key)
        if fault.kind == "stall" and self.hub.faults.stall(self.connection, releases):
            self._stream(file, stop, end, key)
            return
        self._cut()

    def _stream(self, file: HubFile, start: int, end: int, key: tuple[str, str]) -> None:
        rate = self.hub.faults.throttle_bytes_per_s
        if file.path is not None and not rate:
            self._sendfile(file, start, end, key)
            return
        started, sent = time.monotonic(), 0
        for chunk in _paced(file.chunks(start, end), rate):
            if rate:
                delay = started + sent / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            self.hub._count(key, len(chunk))  # first: the client may have it before we return
            try:
                self.connection.sendall(chunk)
            except OSError:
                self.hub._count(key, -len(chunk))
                raise
            sent += len(chunk)

    def _sendfile(self, file: HubFile, start: int, end: int, key: tuple[str, str]) -> None:
        assert file.path is not None
        with open(file.path, "rb") as handle:
            while start < end:
                count = min(end - start, 8 << 20)
                self.hub._count(key, count)  # first: the client may have it before we return
                try:
                    sent = self.connection.sendfile(handle, start, count)
                except OSError:
                    self.hub._count(key, -count)
                    raise
                self.hub._count(key, sent - count)
                if not sent:
                    raise ConnectionAbortedError("sendfile sent nothing")
                start += sent

    def _cut(self) -> None:
        """Close the connection in the middle of a body."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


# ---------------------------------------------------------------- small parsers


def _parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """[start, end) of a single `bytes=` range; None to send the whole body (no Range, several
    ranges, or one that does not parse, as RFC 9110 allows); _Unsatisfiable past the end."""
    if not header or not header.strip().lower().startswith("bytes="):
        return None
    spec = header.strip()[6:].strip()
    if "," in spec:
        return None
    first, sep, last = spec.partition("-")
    if not sep:
        return None
    try:
        if not first:  # suffix: the last n bytes
            n = int(last)
            if n <= 0 or size == 0:
                raise _Unsatisfiable
            return max(0, size - n), size
        start = int(first)
        end = int(last) + 1 if last else size
    except ValueError:
        return None
    if start < 0 or (last and end <= start):
        return None
    if start >= size:
        raise _Unsatisfiable
    return start, min(end, size)


def _paced(
    chunks: Iterator[bytes | memoryview], rate: float | None
) -> Iterator[bytes | memoryview]:
    """Chunks cut to about 10 ms of transfer each when a rate is set, so pacing stays smooth."""
    if not rate:
        yield from chunks
        return
    piece = max(16 << 10, int(rate / 100))
    for chunk in chunks:
        view = memoryview(chunk)
        for offset in range(0, len(view), piece):
            yield view[offset : offset + piece]


def _content_type(path: str) -> str:
    if path.endswith(".json"):
        return "application/json; charset=utf-8"
    if path.endswith((".md", ".txt", ".gitattributes")) or path == ".gitattributes":
        return "text/plain; charset=utf-8"
    return "application/octet-stream"


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
